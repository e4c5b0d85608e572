"""CSR's released files -> the formats the CSR loop and the trainer read (docs/csr-fidelity.md).

* The prompt file `CSR-Prompt-Dataset-12k.json`: a json list of {"id", "image", "input"}, `image` a
  COCO train2014 file name without its "COCO_train2014_" prefix (the released sampler adds it when it
  opens the image) and `input` a question with "<image>" first or last. Out: jsonl of
  {"id", "image": prefix + image, "question"} with "<image>" removed as the sampler removes it.
* A released preference json (construct.py's output): {"id", "image", "conversations",
  "rejected_conversations"} whose human turn is the whole templated prompt ("A chat between ...
  USER: <image>\\n{question} ASSISTANT:") and whose image path includes the image folder. Out: the
  `csr_pairs` records the loop writes: human turn "<image>\\n{question}", image relative to the image root.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

from evalsuite.errors import UserError

COCO_TRAIN_PREFIX = "COCO_train2014_"
IMAGE_TOKEN = "<image>"
_TEMPLATED = re.compile(r"USER:\s*(.*?)\s*ASSISTANT:\s*$", re.DOTALL)


def released_question(text: str) -> str:
    """The question as sample.py feeds it: "<image>\\n" / "\\n<image>" / "<image>" removed."""
    return text.replace(IMAGE_TOKEN + "\n", "").replace("\n" + IMAGE_TOKEN, "").replace(IMAGE_TOKEN, "").strip()


def _field(row: Any, key: str, where: str) -> str:
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected an object, got {type(row).__name__}")
    value = row.get(key)
    if isinstance(value, int) and key == "id":
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: field {key!r} must be a non-empty string")
    return value


def convert_prompts(rows: Iterable[Any], source: str, image_prefix: str = COCO_TRAIN_PREFIX) -> list[dict]:
    """Released prompt records -> {"id", "image", "question"} (see module docstring)."""
    out, seen = [], set()
    for i, row in enumerate(rows):
        where = f"{source}[{i}]"
        rid, image = _field(row, "id", where), _field(row, "image", where)
        question = released_question(_field(row, "input", where))
        if not question:
            raise UserError(f"{where}: 'input' holds no question besides {IMAGE_TOKEN}")
        if rid in seen:
            raise UserError(f"{where}: duplicate id {rid!r}")
        seen.add(rid)
        name = image if image.startswith(image_prefix) else image_prefix + image
        out.append({"id": rid, "image": name, "question": question})
    return out


def _relative_image(path: str, image_dir: str | None, where: str) -> str:
    """`path` below `image_dir` (construct.py joined them), or its file name when no dir is given."""
    if image_dir is None:
        return Path(path).name
    rel = Path(path).relative_to(image_dir) if Path(path).is_relative_to(image_dir) else None
    if rel is None:
        raise UserError(f"{where}: image {path!r} is not under --image-dir {image_dir!r}")
    return rel.as_posix()


def convert_pairs(rows: Iterable[Any], source: str, image_dir: str | None = None) -> list[dict]:
    """Released preference records -> `csr_pairs` records (see module docstring)."""
    out = []
    for i, row in enumerate(rows):
        where = f"{source}[{i}]"
        _field(row, "id", where)
        sides = []
        for key in ("conversations", "rejected_conversations"):
            conv = row.get(key)
            if not isinstance(conv, list) or len(conv) != 2 or not all(isinstance(t, dict) for t in conv):
                raise UserError(f"{where}: {key!r} must be a list of one human and one gpt turn")
            human, answer = conv[0].get("value"), conv[1].get("value")
            if not isinstance(human, str) or not isinstance(answer, str):
                raise UserError(f"{where}: {key!r} turns need string values")
            match = _TEMPLATED.search(human)
            question = released_question(match.group(1) if match else human)
            sides.append((question, answer))
        if sides[0][0] != sides[1][0]:
            raise UserError(f"{where}: conversations and rejected_conversations ask different questions")
        human = {"from": "human", "value": f"{IMAGE_TOKEN}\n{sides[0][0]}"}
        out.append({"id": str(row["id"]), "image": _relative_image(_field(row, "image", where), image_dir, where),
                    "conversations": [human, {"from": "gpt", "value": sides[0][1]}],
                    "rejected_conversations": [human, {"from": "gpt", "value": sides[1][1]}]})
    return out


def check_images(records: list[dict], image_root: str | Path) -> None:
    """Every record's image must exist under image_root (refusing escapes): the first missing one is named."""
    from evalsuite.files import safe_join

    for rec in records:
        if not safe_join(image_root, rec["image"]).is_file():
            raise UserError(f"record {rec['id']!r}: image {rec['image']!r} not found under {str(image_root)!r}")
