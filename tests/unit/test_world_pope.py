"""POPE sampling (hand-worked example), POPE sets of the built world (scored by lmms-eval's own POPE
functions), POPE on the real COCO val2014 80-image annotations, and CocoLayout."""
from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict

import pytest

from evalsuite.errors import UserError
from evalsuite.world.layout import CocoLayout
from evalsuite.world.pope import POPE_COLUMNS, SETTINGS, build_pope, sample_pope
from tests.unit.test_world_build import lmms_task_utils

# Hand-worked example (9 categories, 7 images):
#   img1 {1,2,3}  img2 {1,2,4}  img3 {2,3,4}  img4 {1,5}  img5 {8,9}  img6 {8,9}  img7 {8,6}
# image frequency: 1:3 2:3 8:3 | 3:2 4:2 9:2 | 5:1 6:1 | 7:0  -> popularity order 1,2,8,3,4,9,5,6,7
# co-occurrence (images holding both): (1,2)=2 (2,3)=2 (2,4)=2 (1,3)=1 (1,4)=1 (3,4)=1 (1,5)=1 (8,9)=2 (6,8)=1
# eligible (>= 3 categories): img1, img2, img3
#   img1 lacks 4..9: popular [8,4,9]; adversarial score 4 = 1+2+1 = 4, 5 = c(1,5) = 1, rest 0,
#        ties by frequency (8 first) -> [4,5,8]
#   img2 lacks 3,5..9: popular [8,3,9]; adversarial score 3 = c(1,3)+c(2,3)+c(4,3) = 1+2+1 = 4,
#        5 = 1 -> [3,5,8]
#   img3 lacks 1,5..9: popular [1,8,9]; adversarial score 1 = 2+1+1 = 4, rest 0 -> [1,8,9]
GT = {1: {1, 2, 3}, 2: {1, 2, 4}, 3: {2, 3, 4}, 4: {1, 5}, 5: {8, 9}, 6: {8, 9}, 7: {8, 6}}
EXPECTED_NO = {
    "popular": {1: [8, 4, 9], 2: [8, 3, 9], 3: [1, 8, 9]},
    "adversarial": {1: [4, 5, 8], 2: [3, 5, 8], 3: [1, 8, 9]},
}


def _by_image(rows):
    yes, no = defaultdict(list), defaultdict(list)
    for img, cat, ans in rows:
        (yes if ans == "yes" else no)[img].append(cat)
    return yes, no


def test_sample_pope_hand_worked():
    sets = sample_pope(GT, list(range(1, 10)), seed=0)
    for setting in SETTINGS:
        rows = sets[setting]
        assert [a for _, _, a in rows] == ["yes", "no"] * 9        # alternating, 3 + 3 per image
        yes, no = _by_image(rows)
        assert sorted(yes) == [1, 2, 3]
        for img in (1, 2, 3):
            assert sorted(yes[img]) == sorted(GT[img])
            assert len(set(no[img])) == 3 and not set(no[img]) & GT[img]
            if setting in EXPECTED_NO:
                assert no[img] == EXPECTED_NO[setting][img], (setting, img)
    assert sample_pope(GT, list(range(1, 10)), seed=0) == sets
    assert len(sample_pope(GT, list(range(1, 10)), seed=0, n_images=2)["random"]) == 12


def test_sample_pope_needs_three_categories():
    with pytest.raises(UserError, match=">= 3"):
        sample_pope({1: {1, 2}}, [1, 2, 3, 4], seed=0)


def _gt_from_instances(path):
    d = json.loads(path.read_text())
    gt = {i["id"]: set() for i in d["images"]}
    for a in d["annotations"]:
        gt[a["image_id"]].add(a["category_id"])
    names = {c["id"]: c["name"] for c in d["categories"]}
    files = {i["id"]: i["file_name"] for i in d["images"]}
    return gt, names, files


def _check_pope_json(rows, gt, names, files, setting):
    by_file = {f: i for i, f in files.items()}
    name_to_id = {n: i for i, n in names.items()}
    per_image = defaultdict(lambda: {"yes": set(), "no": set()})
    for r in rows:
        assert set(r) == {"question_id", "image", "question", "answer", "category"}
        assert r["category"] == setting
        name = re.fullmatch(r"Is there an? (.+) in the image\?", r["question"]).group(1)
        cid, img = name_to_id[name], by_file[r["image"]]
        assert (cid in gt[img]) == (r["answer"] == "yes"), r
        per_image[img][r["answer"]].add(cid)
    assert all(len(v["yes"]) == 3 and len(v["no"]) == 3 for v in per_image.values())
    return per_image


def test_pope_on_real_coco_val2014_80(golden_dir, tmp_path):
    """The 80 real val2014 images (annotations only): json written, no parquet; every image with >= 3
    GT categories gets 3 yes + 3 no, with answers true to the instances."""
    inst = golden_dir / "chair" / "coco_val2014_80" / "instances.json"
    gt, names, files = _gt_from_instances(inst)
    eligible = {i for i, c in gt.items() if len(c) >= 3}
    written = build_pope(None, "val2014", tmp_path, seed=0, instances=inst)
    assert written["parquet"] == {}
    for setting in SETTINGS:
        rows = json.loads(written["json"][setting].read_text())
        assert len(rows) == 6 * len(eligible)
        assert set(_check_pope_json(rows, gt, names, files, setting)) == eligible
    sub = build_pope(None, "val2014", tmp_path / "sub", seed=3, n_images=10, instances=inst)
    assert len({r["image"] for r in json.loads(sub["json"]["random"].read_text())}) == 10


def _coco_val2014_instances(path):
    """The hand-worked GT above as a COCO val2014 instances file (file names COCO_val2014_<12 digits>.jpg)."""
    images = [{"id": i, "file_name": f"COCO_val2014_{i:012d}.jpg", "width": 8, "height": 8} for i in GT]
    anns = [{"id": k, "image_id": i, "category_id": c, "bbox": [0, 0, 1, 1], "area": 1, "iscrowd": 0}
            for k, (i, c) in enumerate(((i, c) for i, cats in GT.items() for c in sorted(cats)), start=1)]
    cats = [{"id": c, "name": f"thing{c}", "supercategory": "x"} for c in range(1, 10)]
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))


def test_pope_coco_layout_with_missing_image_names_the_file(tmp_path):
    """Real COCO layout (annotations/instances_val2014.json + val2014/): an image dir without the
    images is a clear error naming the missing file; with the hand-worked GT, and also with the real
    val2014 annotations of the reference data (tests/data/golden)."""
    from tests.conftest import GOLDEN

    sources = [None, GOLDEN / "chair/coco_val2014_80/instances.json"]
    for k, source in enumerate(sources):
        root = tmp_path / str(k)
        (root / "annotations").mkdir(parents=True)
        (root / "val2014").mkdir()
        target = root / "annotations/instances_val2014.json"
        if source is None:
            _coco_val2014_instances(target)
        else:
            shutil.copy(source, target)
        with pytest.raises(UserError, match=r"val2014/COCO_val2014_\d{12}\.jpg: image file missing"):
            build_pope(root, "val2014", root / "out")


def test_world_pope_parquet_and_lmms_eval_scores(world_dir):
    """World POPE parquet has lmms-lab/POPE's columns and an Image feature; lmms-eval's own POPE
    aggregation of an always-"yes" model gives accuracy 0.5, precision 0.5, recall 1,
    F1 = 2 * 0.5 * 1 / 1.5 = 0.6667 and yes-ratio 0.5 (the sets are balanced)."""
    from datasets import load_dataset

    pope = lmms_task_utils("pope")
    gt, names, files = _gt_from_instances(world_dir / "annotations" / "instances_val.json")
    for setting in SETTINGS:
        path = world_dir / "questions" / f"pope_val_{setting}.parquet"
        ds = load_dataset("parquet", data_files=str(path), split="train",
                          cache_dir=str(world_dir.parent / "hf-cache"))
        assert tuple(ds.column_names) == POPE_COLUMNS
        assert type(ds.features["image"]).__name__ == "Image" and ds[0]["image"].size == (64, 64)
        rows = list(ds.remove_columns("image"))
        assert {r["category"] for r in rows} == {setting}
        res = defaultdict(list)
        for r in rows:
            for k, v in pope.pope_process_results(r, ["Yes"]).items():
                res[k].append(v)
        assert pope.pope_aggregate_accuracy(res["pope_accuracy"]) == 0.5
        assert pope.pope_aggregate_recall(res["pope_recall"]) == 1.0
        assert pope.pope_aggregate_f1_score(res["pope_f1_score"]) == pytest.approx(2 / 3)
        assert pope.pope_aggregate_yes_ratio(res["pope_yes_ratio"]) == 0.5
        js = json.loads((world_dir / "questions" / f"pope_val_{setting}.json").read_text())
        _check_pope_json(js, gt, names, files, setting)
        assert [r["question"] for r in js] == [r["question"] for r in rows]


def test_layout_world_and_coco(world_dir, tmp_path):
    lay = CocoLayout(world_dir, "val")
    assert lay.instances_json == world_dir / "annotations/instances_val.json"
    assert lay.captions_json == world_dir / "annotations/captions_val.json"
    assert lay.image_dir == world_dir / "images/val"
    fn = json.loads(lay.instances_json.read_text())["images"][0]["file_name"]
    assert lay.image_path(fn).is_file()

    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations/instances_val2014.json").write_text("{}")
    (tmp_path / "val2014").mkdir()
    (tmp_path / "val2014/COCO_val2014_000000000001.jpg").write_bytes(b"x")
    coco = CocoLayout(tmp_path, "val2014")
    assert coco.instances_json == tmp_path / "annotations/instances_val2014.json"
    assert coco.image_path("COCO_val2014_000000000001.jpg") == tmp_path / "val2014/COCO_val2014_000000000001.jpg"
    with pytest.raises(UserError, match="captions_val2014.json: missing captions"):
        _ = coco.captions_json
    with pytest.raises(UserError, match="escapes"):
        coco.image_path("../annotations/instances_val2014.json")
    with pytest.raises(UserError, match="COCO_val2014_000000000002.jpg: image file missing"):
        coco.image_path("COCO_val2014_000000000002.jpg")
    with pytest.raises(UserError, match="no image directory for split 'train2014'"):
        _ = CocoLayout(tmp_path, "train2014").image_dir
    with pytest.raises(UserError, match="not a directory"):
        CocoLayout(tmp_path / "nope", "val")
