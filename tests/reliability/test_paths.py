"""Unwritable or invalid --output / --store / report --out: one line, before any work,
so a typo costs seconds, not a finished generation.

The store and output folders are checked at the start of `evalsuite run` (before the model loads), so a
bad --store no longer throws away a finished generation. Read-only places are simulated by a failing
probe, since root (CI containers) may write through permission bits.
"""
from __future__ import annotations

import errno
import os
import tempfile
import time

import pytest

from evalsuite.errors import UserError
from evalsuite.files import ensure_writable_dir
from tests.conftest import cli_inprocess, run_cli
from tests.reliability.helpers import error_lines, one_error, snapshot


@pytest.fixture()
def a_file(tmp_path):
    f = tmp_path / "world.json"
    f.write_text("{}")
    return f


def test_ensure_writable_dir(tmp_path, a_file, monkeypatch):
    assert ensure_writable_dir(tmp_path / "new" / "deep", "--out") == tmp_path / "new" / "deep"
    assert (tmp_path / "new" / "deep").is_dir()
    ensure_writable_dir(tmp_path / "later" / "x", "--output", create=False)
    assert not (tmp_path / "later").exists()            # create=False leaves nothing behind
    with pytest.raises(UserError, match=r"^--output .*world.json: is not a directory$"):
        ensure_writable_dir(a_file, "--output")
    with pytest.raises(UserError, match=r"^--store .*world.json/sub: is not a directory \(a parent is a file\)$"):
        ensure_writable_dir(a_file / "sub", "--store", create=False)

    def read_only(*a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(UserError, match=r"^--out .*ro: not writable \(Read-only file system\)$"):
        ensure_writable_dir(tmp_path / "ro", "--out", create=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "world.json"]


@pytest.mark.parametrize("flag", ["--output", "--store"])
def test_run_with_output_or_store_under_a_file_fails_first(flag, tiny_vlm_dir, world_dir, tmp_path, a_file):
    """Exit 2 in a few seconds (no model load, no generation), nothing written anywhere."""
    paths = {"--output": str(tmp_path / "out"), "--store": str(tmp_path / "store")}
    paths[flag] = str(a_file / "sub")
    t0 = time.monotonic()
    # in this process (conftest.cli_inprocess; a real process's refusal: tests/integration/test_cli_foundation.py)
    res = cli_inprocess("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world_dir),
                        "--limit", "2", "--output", paths["--output"], "--store", paths["--store"])
    line = one_error(res)
    assert line == f"evalsuite: error: {flag} {a_file}/sub: is not a directory (a parent is a file)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["world.json"]     # no out/, no store/
    assert time.monotonic() - t0 < 60


def test_run_with_a_read_only_store_fails_before_generation(tiny_vlm_dir, world_dir, tmp_path, monkeypatch, capsys):
    """In process, with the probe failing as on a read-only mount: the model is never loaded."""
    from evalsuite import cli
    from evalsuite.models import vlm

    def never(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(vlm, "load_vlm", never)
    real = tempfile.mkstemp

    def probe(*a, dir=None, prefix="", **k):
        if prefix == ".write-probe-" and "ro" in str(dir):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(*a, dir=dir, prefix=prefix, **k)

    monkeypatch.setattr(tempfile, "mkstemp", probe)
    (tmp_path / "ro").mkdir()
    rc = cli.main(["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world_dir),
                   "--limit", "2", "--store", str(tmp_path / "ro" / "st"), "--output", str(tmp_path / "out")])
    err = error_lines(capsys.readouterr().err)
    assert rc == 2 and err == [f"evalsuite: error: --store {tmp_path}/ro/st: not writable (Read-only file system)"]
    assert snapshot(tmp_path) == {} and not (tmp_path / "out").exists()


def test_output_failing_mid_run_is_one_line_and_keeps_what_finished(tiny_vlm_dir, tiny_clip_dir, world_dir,
                                                                    tmp_path, monkeypatch, capsys):
    """The output folder turns read-only after caption finished: caption stays in the output folder and
    the store, relevance is not stored, exit 1 with one `evalsuite: failed:` line, no temp file left."""
    from evalsuite import cli, files

    real = files.write_bytes_atomic

    def flaky(path, data, overwrite=True):
        if str(path).endswith("relevance/samples.jsonl"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, data, overwrite)

    monkeypatch.setattr(files, "write_bytes_atomic", flaky)   # write_jsonl_atomic ends up here
    store, out = tmp_path / "store", tmp_path / "out"
    rc = cli.main(["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption,relevance", "--clip", str(tiny_clip_dir),
                   "--data-root", str(world_dir), "--limit", "2", "--max-new-tokens", "4",
                   "--store", str(store), "--output", str(out)])
    err = error_lines(capsys.readouterr().err)
    assert rc == 1 and len(err) == 1, err
    assert err[0].startswith("evalsuite: failed: relevance: cannot write its results (Read-only file system: ")
    assert (out / "caption" / "samples.jsonl").is_file() and (out / "summary.json").is_file()
    assert not (out / "relevance" / "samples.jsonl").exists() and not list(out.rglob(".*.tmp"))
    from evalsuite.store import Store

    assert set(Store(store).snapshot().metrics()["task"]) == {"caption"}


def test_report_out_under_a_file_is_one_line(tmp_path, a_file):
    from evalsuite.store import Store
    from evalsuite.types import MetricValue, TaskResult

    store = Store(tmp_path / "store")
    store.write_run({"ckpt": "/c/0", "iteration": 0}, [TaskResult("pope", "0", [MetricValue("f1", 0.8, True, n=9)])])
    before = snapshot(tmp_path)
    res = run_cli("report", "--store", str(store.path), "--out", str(a_file / "rep"))
    assert one_error(res) == f"evalsuite: error: --out {a_file}/rep: is not a directory (a parent is a file)"
    assert snapshot(tmp_path) == before
