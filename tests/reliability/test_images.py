"""Bad images, as real image folders hold them: a decompression bomb, a truncated file, random bytes, a missing file.

One helper (`evalsuite.images.open_rgb`) opens every image; a bomb is a one-line error in `evalsuite run`
and a skipped thumbnail (with a warning and a note on the page) in `evalsuite report`.
"""
from __future__ import annotations

import shutil

import pytest
from PIL import Image

from evalsuite.errors import UserError
from evalsuite.images import open_rgb
from evalsuite.store import Store
from evalsuite.types import MetricValue, TaskResult
from tests.conftest import cli_inprocess, run_cli
from tests.reliability.helpers import bomb_png, one_error, snapshot


def test_open_rgb_turns_every_bad_file_into_one_user_error(tmp_path):
    """20000^2 = 4e8 px > 2 x 89,478,485 (PIL's error); 10000^2 = 1e8 px is in PIL's warning band and
    is refused too. Bytes are labelled by `name`."""
    good = tmp_path / "good.png"
    Image.new("RGB", (32, 24), (200, 10, 10)).save(good)
    data = good.read_bytes()
    (tmp_path / "trunc.png").write_bytes(data[: len(data) // 2])
    (tmp_path / "rand.png").write_bytes(bytes(range(256)) * 4)
    cases = {
        bomb_png(tmp_path / "bomb.png"): "bomb.png: image too large to decode",
        bomb_png(tmp_path / "warnband.png", 10000, 10000): "warnband.png: image too large to decode",
        tmp_path / "trunc.png": "trunc.png: image unreadable",
        tmp_path / "rand.png": "rand.png: image unreadable",
        tmp_path / "missing.png": "missing.png: image not found",
    }
    for path, msg in cases.items():
        with pytest.raises(UserError, match=msg) as exc:
            open_rgb(path)
        assert "\n" not in str(exc.value)
    with pytest.raises(UserError, match="x.png: image too large"):
        open_rgb((tmp_path / "bomb.png").read_bytes(), name="x.png")
    assert open_rgb(data).size == (32, 24) and open_rgb(good).mode == "RGB"


def test_run_with_a_bomb_image_is_one_line_and_stores_nothing(tiny_vlm_dir, world_dir, tmp_path):
    world = tmp_path / "W_bomb"
    shutil.copytree(world_dir, world)
    for png in (world / "images" / "val").glob("*.png"):
        bomb_png(png)
    store, out = tmp_path / "store", tmp_path / "out"
    res = cli_inprocess("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world),
                        "--limit", "2", "--max-new-tokens", "4", "--store", str(store), "--output", str(out))
    line = one_error(res)
    assert "images/val/" in line and ".png: image too large to decode" in line
    assert snapshot(store / "metrics", store / "samples") == {}      # nothing stored
    assert not (out / "caption").exists() and not list(out.rglob(".*.tmp"))


def test_report_skips_a_bomb_thumbnail_and_says_so(tmp_path):
    good = tmp_path / "good.png"
    Image.new("RGB", (40, 30), (10, 120, 10)).save(good)
    bomb = bomb_png(tmp_path / "bomb.png")
    samples = [{"key": f"val:{i}", "image_id": i, "image": str(p), "prompt": "Describe.", "answer": "A dog."}
               for i, p in enumerate([good, bomb])]
    store = Store(tmp_path / "store")
    store.write_run({"ckpt": "/c/0", "iteration": 0},
                    [TaskResult("caption", "1", [MetricValue("answer_words_mean", 2.0, True, n=2)], samples=samples)])
    before = snapshot(store.path)
    res = run_cli("report", "--store", str(store.path), "--out", str(tmp_path / "rep"))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert any("WARNING" in ln and "thumbnail skipped" in ln and "bomb.png" in ln for ln in res.stderr.splitlines())
    html = (tmp_path / "rep" / "index.html").read_text()
    assert html.count('src="data:image/') == 1                         # the good image still has one
    assert 'class="notes"' in html and "thumbnail skipped" in html and "bomb.png: image too large" in html
    assert snapshot(store.path) == before


def test_open_rgb_holds_after_libraries_loosen_pil(tmp_path, monkeypatch):
    """lmms-eval's task modules set ImageFile.LOAD_TRUNCATED_IMAGES = True and raise MAX_IMAGE_PIXELS for the
    whole process; evalsuite's opener keeps refusing truncated files and bombs regardless."""
    import pytest
    from PIL import Image, ImageFile

    from evalsuite.errors import UserError
    from evalsuite.images import open_rgb

    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10**12)
    good = tmp_path / "a.png"
    Image.new("RGB", (64, 64), (10, 200, 30)).save(good)
    cut = tmp_path / "cut.png"
    cut.write_bytes(good.read_bytes()[:-40])
    with pytest.raises(UserError, match="cut.png: image unreadable"):
        open_rgb(cut)
    bomb = tmp_path / "bomb.png"
    Image.new("1", (12000, 12000)).save(bomb)
    with pytest.raises(UserError, match="bomb.png: image too large to decode"):
        open_rgb(bomb)
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True and open_rgb(good).size == (64, 64)
