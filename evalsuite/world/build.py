"""Build the synthetic COCO-format world (layout in docs/ARCHITECTURE.md):

    evalsuite world build --out W --images 600 --seed 0
    python -c "from evalsuite.world.build import build_world; build_world('W', images=600)"

Each image is 64x64 px with 1-4 glyphs on a 2x2 grid of 32 px cells (a 32 px model input still sees
each glyph as a distinct blob); each glyph is one of 12 real COCO categories (categories.py). Every
image's content comes from random.Random(f"{seed}:{image_id}"), so an image does not depend on how
many others are built, and two builds with one seed are byte-identical.
"""
from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from pathlib import Path

from evalsuite.world.captions import reference_captions
from evalsuite.world.categories import BACKGROUND, CATEGORIES, CELLS, COLOURS
from evalsuite.world.draw import render_png
from evalsuite.world.scene import WorldObject, objects_from_annotations, sample_scene  # noqa: F401

log = logging.getLogger(__name__)

SCHEMA = 1
SPLITS = ("train", "val")
IMAGE_SIZE = 64


def split_of(image_id: int, n_images: int, val_fraction: float) -> str:
    """The last round(n * val_fraction) image ids are val, the rest train."""
    return "val" if image_id > n_images - round(n_images * val_fraction) else "train"


def file_name_of(split: str, image_id: int) -> str:
    return f"world_{split}_{image_id:012d}.png"


def _coco_categories() -> list[dict]:
    return [{"id": c.id, "name": c.name, "supercategory": c.supercategory} for c in CATEGORIES]


def _info(split: str, seed: int) -> dict:
    # No date: a timestamp would make two builds with one seed differ.
    return {"description": f"evalsuite synthetic world, split {split}, seed {seed}", "version": str(SCHEMA)}


def _split_records(split: str, scenes: list[tuple[int, list[WorldObject]]], seed: int):
    """COCO instances + captions dicts for one split, and the MME rows."""
    from evalsuite.world.questions import mme_rows

    images, anns, caps, mme = [], [], [], []
    for image_id, objects in scenes:
        fn = file_name_of(split, image_id)
        images.append({"id": image_id, "file_name": fn, "width": IMAGE_SIZE, "height": IMAGE_SIZE,
                       "license": 0})
        for o in objects:
            flat = [v for pt in o.polygon for v in pt]
            anns.append({"id": image_id * 10 + o.cell, "image_id": image_id, "category_id": o.category_id,
                         "segmentation": [flat], "area": o.area, "bbox": o.bbox, "iscrowd": 0})
        # Captions and questions use their own rng streams so changing one never moves the other.
        cap_rng = random.Random(f"{seed}:{image_id}:captions")
        for k, text in enumerate(reference_captions(objects, cap_rng)):
            caps.append({"id": image_id * 10 + k, "image_id": image_id, "caption": text})
        mme += mme_rows(objects, fn, random.Random(f"{seed}:{image_id}:mme"))
    base = {"info": _info(split, seed), "licenses": [{"id": 0, "name": "CC0 (synthetic)", "url": ""}],
            "images": images}
    instances = {**base, "annotations": anns, "categories": _coco_categories()}
    captions = {**base, "annotations": caps}
    return instances, captions, mme


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, separators=(",", ":")) + "\n", encoding="utf-8")


def _stage(stage: Path, images: int, seed: int, val_fraction: float) -> dict:
    """Write the whole world into `stage`; returns the counts for world.json."""
    from evalsuite.progress import progress_bar
    from evalsuite.world.pope import build_pope
    from evalsuite.world.questions import MME_COLUMNS, write_parquet

    scenes: dict[str, list] = {s: [] for s in SPLITS}
    png: dict[str, bytes] = {}
    for image_id in progress_bar(range(1, images + 1), desc="world images", disable=images < 2000):
        objects = sample_scene(random.Random(f"{seed}:{image_id}"), IMAGE_SIZE)
        split = split_of(image_id, images, val_fraction)
        scenes[split].append((image_id, objects))
        fn = file_name_of(split, image_id)
        png[fn] = render_png(IMAGE_SIZE, BACKGROUND,
                             [(o.polygon, COLOURS[o.category.colour]) for o in objects])
        img_path = stage / "images" / split / fn
        img_path.parent.mkdir(parents=True, exist_ok=True)
        img_path.write_bytes(png[fn])
    counts = {}
    for split in SPLITS:
        instances, captions, mme = _split_records(split, scenes[split], seed)
        _write_json(stage / "annotations" / f"instances_{split}.json", instances)
        _write_json(stage / "annotations" / f"captions_{split}.json", captions)
        counts[split] = {"images": len(instances["images"]), "objects": len(instances["annotations"]),
                         "captions": len(captions["annotations"]), "mme_rows": len(mme), "pope_rows": 0}
        if not scenes[split]:
            continue
        write_parquet(mme, MME_COLUMNS, png, stage / "questions" / f"mme_{split}.parquet")
        if any(len({o.category_id for o in objs}) >= 3 for _, objs in scenes[split]):
            pope = build_pope(stage, split, stage / "questions", seed=seed)
            counts[split]["pope_rows"] = len(json.loads(pope["json"]["random"].read_text()))
    return counts


def build_world(out: str | os.PathLike, images: int = 600, seed: int = 0, val_fraction: float = 0.2,
                overwrite: bool = False) -> Path:
    """Build the world into `out` and return it. The world is staged in a sibling temp dir and moved
    into place at the end, so a killed build never leaves a half world that looks finished.
    An existing `out` is refused unless it is empty, or `overwrite` and it holds a world.json."""
    from evalsuite.errors import UserError

    out = Path(out)
    if images < 1:
        raise UserError(f"--images {images}: need at least 1 image")
    if not 0.0 <= val_fraction <= 1.0:
        raise UserError(f"val_fraction {val_fraction}: must lie in [0, 1]")
    occupied = out.exists() and (not out.is_dir() or any(out.iterdir()))
    if occupied and not (overwrite and (out / "world.json").is_file()):
        raise UserError(f"{out}: exists and is not empty (--overwrite replaces a previous world)")
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.building-"))
    try:
        counts = _stage(stage, images, seed, val_fraction)
        meta = {"schema": SCHEMA, "seed": seed, "images": images, "val_fraction": val_fraction,
                "image_size": IMAGE_SIZE, "background": list(BACKGROUND), "cells": list(CELLS),
                "categories": [{**c.to_dict(), "rgb": list(COLOURS[c.colour])} for c in CATEGORIES],
                "splits": counts}
        (stage / "world.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        stage.chmod(0o755)  # mkdtemp makes it private; a world is shared data
        os.replace(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    log.info("world: %d images (%s) -> %s", images,
             ", ".join(f"{s} {c['images']}" for s, c in counts.items()), out)
    return out
