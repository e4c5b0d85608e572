"""Fixtures shared by the training integration tests (test_train_signal.py, test_train_resume.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pairs(world_dir, tmp_path_factory) -> Path:
    """8 DPO pairs (chosen = an image's first caption of the kit world, rejected = the next image's) in
    pairs.json, and the same captions as SFT conversations in sft.json beside it; the pairs file's path."""
    caps = json.loads((world_dir / "annotations" / "captions_train.json").read_text())
    files = {im["id"]: f"images/train/{im['file_name']}" for im in caps["images"]}
    first: dict = {}
    for a in caps["annotations"]:
        first.setdefault(a["image_id"], a["caption"])
    rows = sorted(first.items())[:8]
    d = tmp_path_factory.mktemp("pairs")
    (d / "pairs.json").write_text(json.dumps([{"image": files[i], "prompt": "describe the image.", "chosen": c,
                                               "rejected": rows[(k + 1) % 8][1]} for k, (i, c) in enumerate(rows)]))
    (d / "sft.json").write_text(json.dumps([{"image": files[i], "conversations": [
        {"from": "user", "value": "<image>\ndescribe the image."}, {"from": "assistant", "value": c}]}
        for i, c in rows]))
    return d / "pairs.json"
