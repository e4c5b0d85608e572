"""`evalsuite world build` and `evalsuite pope build` through the real entry point (a subprocess)."""
from __future__ import annotations

import json

from tests.conftest import run_cli


def test_world_build_cli(tmp_path):
    out = tmp_path / "w"
    r = run_cli("world", "build", "--out", str(out), "--images", "40", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == str(out)
    meta = json.loads((out / "world.json").read_text())
    assert meta["seed"] == 3 and meta["images"] == 40
    assert meta["splits"]["train"]["images"] == 32 and meta["splits"]["val"]["images"] == 8
    for split in ("train", "val"):
        for kind in ("instances", "captions"):
            assert (out / "annotations" / f"{kind}_{split}.json").is_file()
        assert (out / "questions" / f"mme_{split}.parquet").is_file()
        assert len(list((out / "images" / split).glob("*.png"))) == meta["splits"][split]["images"]

    again = run_cli("world", "build", "--out", str(out))
    assert again.returncode == 2
    msg = f"evalsuite: error: {out}: exists and is not empty (--overwrite replaces a previous world)"
    assert again.stderr.strip().splitlines() == [msg]
    bad = run_cli("world", "build", "--out", str(tmp_path / "z"), "--images", "0")
    assert bad.returncode == 2 and "--images 0" in bad.stderr


def test_pope_build_cli(world_dir, golden_dir, tmp_path):
    r = run_cli("pope", "build", "--coco", str(world_dir), "--split", "val", "--out", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    for setting in ("random", "popular", "adversarial"):
        assert (tmp_path / "p" / f"pope_val_{setting}.json").is_file()
        assert (tmp_path / "p" / f"pope_val_{setting}.parquet").is_file()
    # same seed and inputs as the world's own build: identical question sets
    assert (tmp_path / "p/pope_val_random.json").read_text() == (world_dir / "questions/pope_val_random.json").read_text()

    inst = golden_dir / "chair" / "coco_val2014_80" / "instances.json"
    r = run_cli("pope", "build", "--instances", str(inst), "--split", "val2014", "--out", str(tmp_path / "c"),
                "--images", "10")
    assert r.returncode == 0, r.stderr
    assert "json only" in r.stdout
    assert len(json.loads((tmp_path / "c/pope_val2014_popular.json").read_text())) == 60

    missing = run_cli("pope", "build", "--coco", str(world_dir), "--split", "val2014", "--out", str(tmp_path / "m"))
    assert missing.returncode == 2
    assert "annotations/instances_val2014.json: missing instances annotation file" in missing.stderr
    neither = run_cli("pope", "build", "--out", str(tmp_path / "n"))
    assert neither.returncode == 2 and "--coco" in neither.stderr
