"""POPE question sets (Li et al. 2023, "Evaluating Object Hallucination in Large Vision-Language
Models") from COCO instance annotations: for each image with at least 3 ground-truth categories,
3 present categories (answer "yes") and 3 absent ones (answer "no"), the absent ones drawn

  random       uniformly from the categories the image lacks (seeded),
  popular      the most frequent categories of the split (by number of images holding them),
  adversarial  the categories co-occurring most with the image's ground truth
               (sum over its GT categories of the number of images holding both).

Ties break by frequency, then category id, so popular/adversarial are deterministic; the present
categories and the image subset are drawn from `seed`. The same images and present categories are used
in all three settings (as in POPE), rows alternate yes/no.

Outputs in OUT: `pope_{split}_{setting}.json` always (a list of {question_id, image, question, answer,
category}, `image` being the COCO file_name), and `pope_{split}_{setting}.parquet` with lmms-lab/POPE's
columns (id, question_id, question, answer, image_source, image, category) when the split's images are
present (lmms-eval needs the pixels; annotation-only COCO json such as a small fixture gives json only).
"""
from __future__ import annotations

import logging
import os
import random
from collections import Counter
from pathlib import Path

from evalsuite.world.categories import article

log = logging.getLogger(__name__)

SETTINGS = ("random", "popular", "adversarial")
POPE_COLUMNS = ("id", "question_id", "question", "answer", "image_source", "image", "category")
PER_SIDE = 3


def pope_question(name: str) -> str:
    return f"Is there {article(name)} {name} in the image?"


def ground_truth(coco) -> dict[int, set[int]]:
    """image id -> set of category ids of its instance annotations (crowd regions included, as CHAIR)."""
    gt: dict[int, set[int]] = {i: set() for i in coco.getImgIds()}
    for ann in coco.dataset.get("annotations", []):
        gt.setdefault(ann["image_id"], set()).add(ann["category_id"])
    return gt


def sample_pope(gt: dict[int, set[int]], categories: list[int], seed: int,
                n_images: int | None = None, per_side: int = PER_SIDE) -> dict[str, list[tuple]]:
    """{setting: [(image_id, category_id, "yes"|"no"), ...]}; pure given its inputs."""
    from evalsuite.errors import UserError

    rng = random.Random(seed)
    freq = Counter(c for cats in gt.values() for c in cats)
    cooc: Counter = Counter()
    for cats in gt.values():
        for a in cats:
            for b in cats:
                if a != b:
                    cooc[a, b] += 1
    eligible = sorted(i for i, cats in gt.items() if len(cats) >= per_side)
    if not eligible:
        raise UserError(f"no image has >= {per_side} annotated categories: POPE needs {per_side} present")
    if n_images is not None and n_images < len(eligible):
        eligible = sorted(rng.sample(eligible, n_images))
    by_freq = sorted(categories, key=lambda c: (-freq[c], c))
    out: dict[str, list[tuple]] = {s: [] for s in SETTINGS}
    for img in eligible:
        cats = gt[img]
        present = rng.sample(sorted(cats), per_side)
        lacking = [c for c in categories if c not in cats]
        score = {c: sum(cooc[p, c] for p in cats) for c in lacking}
        absent = {
            "random": rng.sample(lacking, per_side),
            "popular": [c for c in by_freq if c not in cats][:per_side],
            "adversarial": sorted(lacking, key=lambda c: (-score[c], -freq[c], c))[:per_side],
        }
        for setting in SETTINGS:
            for yes, no in zip(present, absent[setting]):
                out[setting] += [(img, yes, "yes"), (img, no, "no")]
    return out


def build_pope(coco_root: str | os.PathLike, split: str, out: str | os.PathLike, seed: int = 0,
               n_images: int | None = None, instances: str | os.PathLike | None = None,
               image_dir: str | os.PathLike | None = None) -> dict[str, dict[str, Path]]:
    """Write the three POPE sets of `split`; returns {"json": {setting: path}, "parquet": {...}}.

    `instances` / `image_dir` override what CocoLayout(coco_root, split) finds."""
    from pycocotools.coco import COCO

    from evalsuite.errors import UserError
    from evalsuite.files import safe_join, write_json_atomic
    from evalsuite.world.layout import CocoLayout

    layout = CocoLayout(coco_root, split) if coco_root is not None else None
    ann_path = Path(instances) if instances else layout.instances_json
    if not ann_path.is_file():
        raise UserError(f"{ann_path}: COCO instances file not found")
    img_dir = Path(image_dir) if image_dir else (layout.find_image_dir() if layout else None)
    coco = _load_coco(COCO, ann_path)
    names = {c["id"]: c["name"] for c in coco.dataset["categories"]}
    files = {i["id"]: i["file_name"] for i in coco.dataset["images"]}
    sets = sample_pope(ground_truth(coco), sorted(names), seed, n_images)

    written: dict[str, dict[str, Path]] = {"json": {}, "parquet": {}}
    image_bytes = None
    if img_dir is not None and img_dir.is_dir():
        needed = sorted({files[i] for rows in sets.values() for i, _, _ in rows})
        image_bytes = {}
        for fn in needed:
            p = safe_join(img_dir, fn, field="file_name")
            if not p.is_file():
                raise UserError(f"{p}: image file missing (file_name {fn!r} of {ann_path})")
            image_bytes[fn] = p.read_bytes()
    else:
        log.info("no image directory for %s: writing POPE json only (no parquet)", ann_path)
    for setting, triples in sets.items():
        rows = [{"id": str(k), "question_id": str(k + 1), "question": pope_question(names[c]),
                 "answer": ans, "image_source": Path(files[i]).stem, "image": files[i],
                 "category": setting} for k, (i, c, ans) in enumerate(triples)]
        stem = f"pope_{split}_{setting}"
        written["json"][setting] = write_json_atomic(
            Path(out) / f"{stem}.json",
            [{k: r[k] for k in ("question_id", "image", "question", "answer", "category")} for r in rows])
        if image_bytes is not None:
            from evalsuite.world.questions import write_parquet

            written["parquet"][setting] = write_parquet(rows, POPE_COLUMNS, image_bytes,
                                                        Path(out) / f"{stem}.parquet")
    log.info("POPE %s: %d questions per setting over %d images", split, len(sets["random"]),
             len(sets["random"]) // (2 * PER_SIDE))
    return written


def _load_coco(COCO, path: Path):
    """pycocotools prints to stdout while loading; keep the CLI's stdout for its result."""
    import contextlib
    import io
    import json

    from evalsuite.errors import UserError

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            coco = COCO(str(path))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a COCO instances file ({exc})") from exc
    for key in ("images", "annotations", "categories"):
        if key not in coco.dataset:
            raise UserError(f"{path}: COCO instances file has no {key!r} list")
    return coco
