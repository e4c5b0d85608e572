"""MME-style yes/no question pairs derived from a world image's annotations, and the parquet writer
shared with POPE.

MME (Fu et al. 2023) asks two questions per image and category, one whose answer is Yes and one whose
answer is No; lmms-eval's `mme` scores a pair as acc (0/50/100) + acc+ (100 if both right), averaged
per category. Here the categories are ones the annotations answer honestly:
  existence             Is there a {name} in this image?            (present vs absent category)
  count                 Are there {n} {plural} in this image?       (true count vs true count +- 1)
  color                 Is there a {colour} {name} in this image?   (the glyph's colour vs another)
  position              Is the {name} in the {cell} of this image?  (only for a category seen once)
  numerical_calculation Is the number of objects in this image plus {k} equal to {m}?
The first four are MME "Perception" categories, the last a "Cognition" one (lmms-eval's eval_type_dict).
Columns are those of lmms-lab/MME: question_id, image, question, answer, category; question_id is
"{category}/{file_name}" and is shared by the two rows of a pair.
"""
from __future__ import annotations

import os
import random
from collections.abc import Sequence
from pathlib import Path

from evalsuite.world.categories import (
    BY_ID,
    CATEGORIES,
    CELLS,
    COLOURS,
    NUMBER_WORDS,
    article,
)

SUFFIX = " Please answer yes or no."
MME_CATEGORIES = ("existence", "count", "color", "position", "numerical_calculation")
MME_COLUMNS = ("question_id", "image", "question", "answer", "category")


def existence_q(name: str) -> str:
    return f"Is there {article(name)} {name} in this image?{SUFFIX}"


def count_q(cat, n: int) -> str:
    if n == 1:
        return f"Is there only one {cat.name} in this image?{SUFFIX}"
    return f"Are there {NUMBER_WORDS[n]} {cat.plural} in this image?{SUFFIX}"


def color_q(colour: str, cat) -> str:
    return f"Is there {article(colour)} {colour} {cat.name} in this image?{SUFFIX}"


def position_q(cat, cell: int) -> str:
    return f"Is the {cat.name} in the {CELLS[cell]} of this image?{SUFFIX}"


def numerical_q(k: int, m: int) -> str:
    return f"Is the number of objects in this image plus {NUMBER_WORDS[k]} equal to {NUMBER_WORDS[m]}?{SUFFIX}"


def mme_pairs(objects, rng: random.Random) -> list[tuple[str, str, str]]:
    """[(category, yes_question, no_question)] for one image (position only when answerable)."""
    counts: dict[int, int] = {}
    for o in objects:
        counts[o.category_id] = counts.get(o.category_id, 0) + 1
    present = sorted(counts)
    absent = [c.id for c in CATEGORIES if c.id not in counts]
    pairs = []

    yes_c = BY_ID[rng.choice(present)]
    pairs.append(("existence", existence_q(yes_c.name), existence_q(BY_ID[rng.choice(absent)].name)))

    cat = BY_ID[rng.choice(present)]
    n = counts[cat.id]
    wrong = n + 1 if n == 1 or rng.random() < 0.5 else n - 1
    pairs.append(("count", count_q(cat, n), count_q(cat, wrong)))

    cat = BY_ID[rng.choice(present)]
    other = rng.choice(sorted(c for c in COLOURS if c != cat.colour))
    pairs.append(("color", color_q(cat.colour, cat), color_q(other, cat)))

    singles = [o for o in objects if counts[o.category_id] == 1]
    if singles:
        o = rng.choice(singles)
        wrong_cell = rng.choice([c for c in range(len(CELLS)) if c != o.cell])
        pairs.append(("position", position_q(o.category, o.cell), position_q(o.category, wrong_cell)))

    k, total = rng.randint(1, 3), len(objects)
    wrong = total + k + rng.choice([-1, 1])
    pairs.append(("numerical_calculation", numerical_q(k, total + k), numerical_q(k, wrong)))
    return pairs


def mme_rows(objects, file_name: str, rng: random.Random) -> list[dict]:
    """Two rows per question_id: Yes first, then No (`image` holds the file name until written)."""
    rows = []
    for category, yes_q, no_q in mme_pairs(objects, rng):
        qid = f"{category}/{file_name}"
        rows.append({"question_id": qid, "image": file_name, "question": yes_q, "answer": "Yes",
                     "category": category})
        rows.append({"question_id": qid, "image": file_name, "question": no_q, "answer": "No",
                     "category": category})
    return rows


def write_parquet(rows: Sequence[dict], columns: Sequence[str], image_bytes: dict[str, bytes],
                  path: str | os.PathLike) -> Path:
    """Write rows with `datasets.Dataset.to_parquet`; the `image` column (a file name in `rows`)
    becomes an HF Image feature holding the PNG/JPEG bytes, so the parquet file stands alone."""
    from datasets import Dataset, Features, Image, Value
    from datasets.utils import logging as ds_logging

    features = Features({c: (Image() if c == "image" else Value("string")) for c in columns})
    data = {c: [str(r[c]) for r in rows] for c in columns if c != "image"}
    data["image"] = [{"bytes": image_bytes[r["image"]], "path": r["image"]} for r in rows]
    ds = Dataset.from_dict({c: data[c] for c in columns}, features=features)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    # datasets draws a progress bar per file; silence it for our small files, then restore.
    was_disabled = ds_logging.is_progress_bar_enabled() is False
    ds_logging.disable_progress_bar()
    try:
        ds.to_parquet(str(tmp))
    finally:
        if not was_disabled:
            ds_logging.enable_progress_bar()
    os.replace(tmp, path)
    return path
