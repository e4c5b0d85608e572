"""Crafted config, checkpoint, cache and store files (findings-reliability-2.md probes H3-H6, H8-H10, S6,
S8): each is one error line and exit 2 (or a warning and a working run), bounded in time, with no
traceback. The parsers are evalsuite/safeio.py."""
from __future__ import annotations

import json
import shutil
import struct
import time

import pytest

from evalsuite import safeio
from evalsuite.errors import UserError
from tests.reliability.helpers import error_lines

CHAIN = ", ".join(["&a [lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
                  + [f"&{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")])


def _run_main(capsys, *argv) -> tuple[int, list[str], float]:
    from evalsuite.cli import main

    t = time.monotonic()
    rc = main(list(argv))
    return rc, error_lines(capsys.readouterr().err), time.monotonic() - t


@pytest.mark.parametrize("probe, text", [
    ("H3", f"label: [{CHAIN}]\n"),
    ("H4", f"tasks: [caption, [{CHAIN}]]\n"),
    ("H6", "tasks: " + "[" * 50_000 + "]" * 50_000 + "\n"),
])
def test_H3_H4_H6_yaml_bomb_or_deep_preset_is_one_line_fast(probe, text, capsys, tmp_path):
    """H3 (alias bomb under label), H4 (under tasks, --dry-run), H6 (50k deep): one line, exit 2, bounded in
    time (well under 1 s here; the bound allows a loaded machine and is still far below the minutes that
    walking the ~4e8 items of the expanded aliases takes)."""
    cfg = tmp_path / "b.yaml"
    cfg.write_text(text)
    rc, lines, took = _run_main(capsys, "run", "--config", str(cfg), "--ckpt", str(tmp_path), "--tasks", "caption",
                                "--dry-run")
    assert rc == 2 and len(lines) == 1 and str(cfg) in lines[0], lines
    assert ("aliases" in lines[0]) if probe != "H6" else ("nested deeper" in lines[0])
    assert took < 30


def test_H5_yaml_bomb_in_a_training_preset_is_one_line(capsys, tmp_path):
    """H5: the alias chain under lora_target_modules of a train preset."""
    from training.train import main

    cfg = tmp_path / "t.yaml"
    cfg.write_text(f"lora_target_modules: [{CHAIN}]\n")
    rc = main(["--config", str(cfg), "--output_dir", str(tmp_path / "o")])
    lines = error_lines(capsys.readouterr().err)
    assert rc == 2 and len(lines) == 1 and "aliases" in lines[0], lines


def test_yaml_budget_keeps_ordinary_anchors(tmp_path):
    """Presets that share a section through an anchor still load."""
    from evalsuite.config import read_yaml

    p = tmp_path / "ok.yaml"
    p.write_text("base: &b {lr: 0.001, steps: 3}\nother: *b\nlist: [1, 2, 3]\n")
    assert read_yaml(p) == {"base": {"lr": 0.001, "steps": 3}, "other": {"lr": 0.001, "steps": 3}, "list": [1, 2, 3]}


# ------------------------------------------------------------------------------------ safetensors
def _st(path, header, data: bytes = b"\0" * 8):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


GOOD = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
BAD_HEADERS = [
    ("H8-list", [], "a JSON list"),
    ("H8-no-offsets", {"w": {"dtype": "F32", "shape": [2]}}, "data_offsets"),
    ("H8-string-offsets", {"w": {"dtype": "F32", "shape": [2], "data_offsets": ["a", "b"]}}, "data_offsets"),
    ("H8-int-entry", {"w": 1}, "a JSON int"),
    ("H8-deep", b"[" * 100_000 + b"]" * 100_000, "bounded depth"),
    ("H9-huge-shape", {"w": {"dtype": "F32", "shape": [10**9, 10**9], "data_offsets": [0, 8]}}, "needs"),
    ("H9-dtype", {"w": {"dtype": "EVIL", "shape": [2], "data_offsets": [0, 8]}}, "unknown dtype"),
    ("H9-negative", {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, -5]}}, "data_offsets"),
    ("H9-overlap", {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "v": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, "overlaps"),
    ("H9-short", {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, "header describes"),
    ("H9-metadata", {"__metadata__": {"a": 1}, **GOOD}, "__metadata__"),
]


@pytest.mark.parametrize("probe, header, expect", BAD_HEADERS, ids=[b[0] for b in BAD_HEADERS])
def test_H8_H9_safetensors_header_is_validated_before_load(probe, header, expect, tmp_path):
    """H8/H9: every wrong-shape header is one UserError naming the file."""
    path = _st(tmp_path / "model.safetensors", header)
    with pytest.raises(UserError) as e:
        safeio.check_safetensors(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and expect in msg and "\n" not in msg, msg


def test_valid_safetensors_header_passes(tmp_path, tiny_vlm_dir):
    assert safeio.check_safetensors(_st(tmp_path / "m.safetensors", GOOD)) == GOOD
    for shard in tiny_vlm_dir.glob("*.safetensors"):   # what transformers writes passes
        safeio.check_safetensors(shard)


@pytest.mark.parametrize("probe, mutate, expect", [
    ("H8", lambda d: _st(d / "model.safetensors", []), "a JSON list"),
    ("H9", lambda d: _st(d / "model.safetensors", {"w": {"dtype": "EVIL", "shape": [2], "data_offsets": [0, 8]}}),
     "unknown dtype"),
    ("H10-nonutf8", lambda d: (d / "config.json").write_bytes(
        (d / "config.json").read_bytes().replace(b'"llava"', b'"llava\xff"')), "not UTF-8"),
    ("H10-list", lambda d: (d / "config.json").write_text("[1, 2]"), "expected a JSON object"),
    ("H10-deep", lambda d: (d / "config.json").write_text("[" * 100_000 + "]" * 100_000), "nested deeper"),
])
def test_H8_H9_H10_crafted_checkpoint_is_one_line_before_the_output_dir(probe, mutate, expect, capsys, tmp_path,
                                                                        tiny_vlm_dir, world_dir):
    """H8, H9, H10 through `evalsuite run`: one line, exit 2, no output dir and no store."""
    ck = tmp_path / "ck"
    shutil.copytree(tiny_vlm_dir, ck)
    for p in ck.glob("*.safetensors"):
        p.unlink()
    if probe.startswith("H10"):
        shutil.copy(next(tiny_vlm_dir.glob("*.safetensors")), ck)
    mutate(ck)
    rc, lines, _ = _run_main(capsys, "run", "--ckpt", str(ck), "--data-root", str(world_dir), "--tasks", "caption",
                             "--limit", "1", "--store", str(tmp_path / "st"), "--output", str(tmp_path / "o"))
    assert rc == 2 and len(lines) == 1 and expect in lines[0], lines
    assert not (tmp_path / "o").exists() and not (tmp_path / "st").exists()


# ------------------------------------------------------------------------------ caches and footers
def test_S6_non_utf8_resume_cache_line_is_skipped_with_a_warning(tmp_path, caplog):
    """S6: non-UTF-8 bytes, a JSON list and a torn line in the resume cache are skipped, naming the file."""
    from evalsuite.models.cache import ResponseCache

    c = ResponseCache(tmp_path, "h", "caption")
    c.put_many([("k1", 1, "generate_until", "a dog")])
    with open(c.path, "ab") as fh:
        fh.write(b'\xff\xfe garbage \x00\n{"key": 5}\n[1,2]\n' + b"[" * 5000 + b"\n" + b'{"key": "k2", "resp')
    with caplog.at_level("WARNING"):
        again = ResponseCache(tmp_path, "h", "caption")
    assert again.get("k1") == "a dog" and len(again) == 1
    assert any(str(c.path) in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)


def test_S8_deeply_nested_store_footer_is_one_line(tmp_path, capsys):
    """S8: a footer nested 100,000 deep makes `table` one line naming the file (exit 2), not a RecursionError."""
    from tests.reliability.test_store import _rewrite_footer, two_runs

    store, ids = two_runs(tmp_path)
    path = store.metrics_dir / f"{ids[1]}.parquet"
    _rewrite_footer(path, b"[" * 100_000 + b"]" * 100_000)
    rc, lines, _ = _run_main(capsys, "table", "--store", str(store.path))
    assert rc == 2 and len(lines) == 1 and str(path) in lines[0] and "nested deeper" in lines[0], lines
    assert store.has_result("h0", "x") is None   # the reuse check skips the damaged file


def test_json_depth_counts_brackets_outside_strings():
    assert safeio.json_depth(b'{"a": "[[[[[[", "b": [[1]]}', 10) == 3
    assert safeio.loads_json(b'{"a": "[[[["}') == {"a": "[[[["}
    with pytest.raises(ValueError):
        safeio.loads_json("[" * 200 + "]" * 200)


def test_S1_damaged_store_file_is_named_in_a_warning_by_the_reuse_check(tmp_path, caplog):
    """S1: a truncated metrics file is skipped by the "already stored" check with a warning naming it."""
    from tests.reliability.test_store import two_runs

    store, ids = two_runs(tmp_path)
    path = store.metrics_dir / f"{ids[1]}.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with caplog.at_level("WARNING"):
        assert store.has_result("h1", "x") is None
    assert any(str(path) in r.getMessage() and "move it out" in r.getMessage() for r in caplog.records)
