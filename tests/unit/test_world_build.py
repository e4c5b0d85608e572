"""The built world: COCO json loads with pycocotools and agrees with the pixels, captions name exactly
the present objects (by the golden CHAIR vocabulary), builds are byte-identical by seed, and the MME
parquet is balanced, correct against the annotations, and scored by lmms-eval's own MME functions."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from evalsuite.world.build import build_world
from evalsuite.world.categories import BY_ID, BY_NAME, CELLS, COLOURS, NUMBER_WORDS
from evalsuite.world.questions import MME_COLUMNS
from evalsuite.world.scene import cell_of_bbox
from tests.unit.test_world_chairmap import chair_ref  # noqa: F401  (fixture)

SPLITS = ("train", "val")


def _coco(path):
    from pycocotools.coco import COCO

    with contextlib.redirect_stdout(io.StringIO()):
        return COCO(str(path))


def lmms_task_utils(task: str):
    """lmms-eval's task utils module loaded from its file (importing the lmms_eval.tasks package
    indexes every task, ~13 s); mme/pope utils only need loguru."""
    root = Path(importlib.util.find_spec("lmms_eval").submodule_search_locations[0])
    spec = importlib.util.spec_from_file_location(f"_lmms_{task}_utils", root / "tasks" / task / "utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gt(coco) -> dict[int, dict[int, int]]:
    """image id -> {category id: count}."""
    out: dict[int, dict[int, int]] = {i: defaultdict(int) for i in coco.getImgIds()}
    for a in coco.dataset["annotations"]:
        out[a["image_id"]][a["category_id"]] += 1
    return out


def test_instances_load_and_match_pixels(world_dir):
    """pycocotools loads both splits; each image has 1-4 objects in distinct cells; the mask area is the
    polygon area up to rasterisation (within 25% + 8 px for glyphs of >= 14 px); the pixel at each
    bbox centre (inside every glyph shape) has the category's colour."""
    from PIL import Image

    n_images = 0
    for split in SPLITS:
        coco = _coco(world_dir / "annotations" / f"instances_{split}.json")
        assert sorted(coco.getCatIds()) == sorted(BY_ID)
        for img in coco.loadImgs(coco.getImgIds()):
            n_images += 1
            anns = coco.loadAnns(coco.getAnnIds(imgIds=img["id"]))
            assert 1 <= len(anns) <= 4
            assert len({cell_of_bbox(a["bbox"], 64, 64) for a in anns}) == len(anns)
            pix = Image.open(world_dir / "images" / split / img["file_name"]).convert("RGB")
            assert pix.size == (img["width"], img["height"]) == (64, 64)
            for a in anns:
                x, y, w, h = a["bbox"]
                assert 0 <= x and 0 <= y and x + w <= 64 and y + h <= 64 and a["iscrowd"] == 0
                assert abs(coco.annToMask(a).sum() - a["area"]) <= 0.25 * a["area"] + 8
                assert pix.getpixel((int(x + w / 2), int(y + h / 2))) == COLOURS[BY_ID[a["category_id"]].colour]
    meta = json.loads((world_dir / "world.json").read_text())
    assert n_images == meta["images"] == 60
    assert meta["splits"]["val"]["images"] == 12     # round(60 * 0.2)


@pytest.mark.parametrize("normaliser", ["pattern", "lemma"])
def test_reference_captions_mention_only_present_objects(world_dir, chair_ref, normaliser):  # noqa: F811
    for split in SPLITS:
        gt = _gt(_coco(world_dir / "annotations" / f"instances_{split}.json"))
        caps = _coco(world_dir / "annotations" / f"captions_{split}.json")
        for image_id, cats in gt.items():
            texts = [a["caption"] for a in caps.loadAnns(caps.getAnnIds(imgIds=image_id))]
            assert len(texts) == 5 and len(set(texts)) == 5
            present = {BY_ID[c].name for c in cats}
            for t in texts:
                assert set(chair_ref.categories(t, normaliser)) == present, t


def test_deterministic_by_seed(tmp_path):
    """Two builds with one seed are byte-identical (json, images, world.json); another seed differs."""
    a = build_world(tmp_path / "a", images=30, seed=7)
    b = build_world(tmp_path / "b", images=30, seed=7)
    c = build_world(tmp_path / "c", images=30, seed=8)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.suffix in (".json", ".png"))
    assert len(files) == 30 + 4 + 1 + 6      # images, 4 annotation files, world.json, 6 POPE json
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    assert (a / "annotations/instances_val.json").read_bytes() != (c / "annotations/instances_val.json").read_bytes()


def test_refuses_non_empty_out_unless_overwrite(tmp_path):
    from evalsuite.errors import UserError

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        build_world(tmp_path / "x", images=5, overwrite=True)      # no world.json: not ours
    assert (tmp_path / "x" / "keep.txt").read_text() == "mine"
    w = build_world(tmp_path / "w", images=5)
    with pytest.raises(UserError, match="not empty"):
        build_world(w, images=5)
    build_world(w, images=6, overwrite=True)
    assert json.loads((w / "world.json").read_text())["images"] == 6
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no staging dir left


def test_build_600_images(tmp_path):
    """The demo and the tests build worlds on the fly (the built-in world's 600 images; its time, ~3 s, is
    a speed target measured by bench/startup_speed.py, not asserted here)."""
    w = build_world(tmp_path / "big", images=600, seed=1)
    assert json.loads((w / "world.json").read_text())["images"] == 600
    caps = [json.loads(p.read_text()) for p in (w / "annotations").glob("captions_*.json")]
    assert sum(len(c["images"]) for c in caps) == 600
    assert len([p for p in (w / "images").rglob("*") if p.is_file()]) == 600


def _mme_rows(world_dir, split):
    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=str(world_dir / "questions" / f"mme_{split}.parquet"),
                      split="train", cache_dir=str(world_dir.parent / "hf-cache"))
    return ds


def test_mme_parquet_columns_and_image_feature(world_dir):
    ds = _mme_rows(world_dir, "val")
    assert tuple(ds.column_names) == MME_COLUMNS
    assert type(ds.features["image"]).__name__ == "Image"
    img = ds[0]["image"]
    assert img.size == (64, 64)


def _check_answer(q: str, category: str, counts: dict[int, int], cells: dict[int, int]) -> str:
    """The true answer of one MME question, read off the annotations (independent of the builder)."""
    q = q.removesuffix(" Please answer yes or no.")
    if category == "existence":
        name = re.fullmatch(r"Is there an? (.+) in this image\?", q).group(1)
        return "Yes" if BY_NAME[name].id in counts else "No"
    if category == "count":
        m = re.fullmatch(r"Is there only one (.+) in this image\?", q)
        if m:
            return "Yes" if counts.get(BY_NAME[m.group(1)].id) == 1 else "No"
        num, plural = re.fullmatch(r"Are there (\w+) (.+) in this image\?", q).groups()
        cat = next(c for c in BY_ID.values() if c.plural == plural)
        return "Yes" if counts.get(cat.id) == NUMBER_WORDS.index(num) else "No"
    if category == "color":
        colour, name = re.fullmatch(r"Is there an? (\w+) (.+) in this image\?", q).groups()
        return "Yes" if BY_NAME[name].id in counts and BY_NAME[name].colour == colour else "No"
    if category == "position":
        name, cell = re.fullmatch(r"Is the (.+) in the (.+) of this image\?", q).groups()
        return "Yes" if cells.get(BY_NAME[name].id) == CELLS.index(cell) else "No"
    k, m = re.fullmatch(r"Is the number of objects in this image plus (\w+) equal to (\w+)\?", q).groups()
    return "Yes" if sum(counts.values()) + NUMBER_WORDS.index(k) == NUMBER_WORDS.index(m) else "No"


def test_mme_pairs_balanced_and_correct(world_dir):
    for split in SPLITS:
        coco = _coco(world_dir / "annotations" / f"instances_{split}.json")
        gt = _gt(coco)
        by_file = {i["file_name"]: i["id"] for i in coco.dataset["images"]}
        cells = {}
        for a in coco.dataset["annotations"]:
            cells.setdefault(a["image_id"], {})[a["category_id"]] = cell_of_bbox(a["bbox"], 64, 64)
        ds = _mme_rows(world_dir, split).remove_columns("image")
        pairs = defaultdict(list)
        for r in ds:
            pairs[r["question_id"]].append(r["answer"])
            category, file_name = r["question_id"].split("/")
            assert category == r["category"]
            image_id = by_file[file_name]
            assert _check_answer(r["question"], category, gt[image_id], cells[image_id]) == r["answer"], r
        assert all(sorted(v) == ["No", "Yes"] for v in pairs.values())
        # every image has existence, count, color and numerical_calculation pairs
        assert sum(1 for q in pairs if q.startswith("existence/")) == len(gt)


def test_mme_scores_with_lmms_eval_functions(world_dir):
    """lmms-eval's own mme_process_results/mme_aggregate_results: an always-"Yes" model gets acc 50 and
    acc+ 0 on every pair, so 50 per category: perception = 4 categories x 50 = 200 (existence, count,
    color, position), cognition = 1 x 50 (numerical_calculation). The true answers give 200 each."""
    mme = lmms_task_utils("mme")
    rows = list(_mme_rows(world_dir, "val").remove_columns("image"))
    scores = {}
    for name, pred in (("yes", lambda r: "Yes"), ("oracle", lambda r: r["answer"])):
        per = defaultdict(list)
        for r in rows:
            for key, val in mme.mme_process_results(r, [pred(r)]).items():
                per[key].append(val)
        scores[name] = {k: mme.mme_aggregate_results(v) for k, v in per.items()}
    assert scores["yes"] == {"mme_perception_score": 200.0, "mme_cognition_score": 50.0}
    assert scores["oracle"] == {"mme_perception_score": 800.0, "mme_cognition_score": 200.0}


def test_objects_from_annotations_round_trip(world_dir):
    """Objects read back from the instances json equal the scene the builder sampled (same rng stream),
    so the demo can write SFT captions from the json alone."""
    import random

    from evalsuite.errors import UserError
    from evalsuite.world.captions import describe
    from evalsuite.world.scene import objects_from_annotations, sample_scene

    coco = _coco(world_dir / "annotations" / "instances_val.json")
    for image_id in coco.getImgIds():
        back = objects_from_annotations(coco.loadAnns(coco.getAnnIds(imgIds=image_id)), 64, 64)
        orig = sample_scene(random.Random(f"0:{image_id}"), 64)
        assert [(o.category_id, o.cell) for o in back] == [(o.category_id, o.cell) for o in orig]
        assert [o.bbox for o in back] == [o.bbox for o in orig]
        assert describe(back) == describe(orig)
    with pytest.raises(UserError, match="category_id 5 is not a world category"):
        objects_from_annotations([{"id": 1, "category_id": 5, "bbox": [0, 0, 1, 1]}], 64, 64)
