"""`evalsuite run`'s reliability contract: a bad setting is exit 2 and one stderr line before any model
loads (and leaves no file behind); the synthetic world is opt-in; an output directory belongs to one run;
a run killed with SIGKILL and started again regenerates no finished answer and stores nothing twice.

Each case checks the exit code, that stderr has exactly one line besides log records and progress bars,
and the files before and after.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_inprocess
from tests.reliability.helpers import _PROGRESS

_LOG = re.compile(r"^(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(,\d+)? (DEBUG|INFO|WARNING) ")


def error_lines(stderr: str) -> list[str]:
    """stderr lines that are neither log records nor progress bars."""
    return [ln for ln in stderr.splitlines()
            if ln.strip() and not _LOG.match(ln) and not _PROGRESS.search(ln.split("\r")[-1])]


def files(*roots: Path) -> dict[str, str]:
    return {str(p): p.read_bytes().hex() for r in roots if r.exists() for p in sorted(r.rglob("*")) if p.is_file()}


def main_run(capsys, *argv) -> tuple[int, list[str]]:
    from evalsuite.cli import main

    rc = main(["run", *argv])
    return rc, error_lines(capsys.readouterr().err)


BAD = [
    (["--tasks", "caption", "--limit", "0"], "command line: limit: must be >= 1, got 0"),
    (["--tasks", "caption", "--limit", "-1"], "command line: limit: must be >= 1, got -1"),
    (["--tasks", "caption", "--limit", "three"], "command line: limit: expected an int or null, got the string 'three'"),
    (["--tasks", "caption", "--batch-size", "-3"], "command line: batch_size: must be >= 1, got -3"),
    (["--tasks", "caption", "--batch-size", "0"], "command line: batch_size: must be >= 1, got 0"),
    (["--tasks", "caption", "--max-new-tokens", "0"], "--max-new-tokens: gen.max_new_tokens: must be >= 1, got 0"),
    (["--tasks", "chair", "--chair-images", "-1"], "--chair-images: chair.n_images: must be >= 1, got -1"),
    (["--tasks", "chair", "--variant", "nosuch"], "--variant: chair.variant: 'nosuch' is not one of 'original', 'opera', 'opera_lemma'"),
    (["--tasks", "caption", "--device", "bogus"], "command line: device: 'bogus' is not cpu, cuda, cuda:N or mps"),
    (["--tasks", "caption", "--device", "cuda:99"], "command line: device: 'cuda:99' requested but this machine has"),
    (["--tasks", "pope", "--gen-kwargs", "temperature=abc"],
     "--gen-kwargs: lmms.gen_kwargs: temperature='abc': expected float"),
    (["--tasks", "pope", "--gen-kwargs", "notakv"], "--gen-kwargs: lmms.gen_kwargs: 'notakv' is not key=value"),
    (["--tasks", "pope", "--gen-kwargs", "beams=2"], "--gen-kwargs: lmms.gen_kwargs: unknown key 'beams'"),
    (["--tasks", "caption", "--gen-kwargs", "max_new_tokens=4"],
     "--gen-kwargs: sets lmms.gen_kwargs, which no task of this run reads (tasks: caption)"),
    (["--tasks", "chair", "chair.n_imagez=5"],
     "command line: unknown key 'chair.n_imagez' (did you mean 'chair.n_images'?)"),
    (["--tasks", "caption", "chair.n_images=5"],
     "command line: chair.n_images: no task of this run reads the chair section (tasks: caption)"),
    (["--tasks", "caption", "--bogus", "1"], "command line: unknown key 'bogus'"),
    (["--tasks", "caption,caption"], "command line: tasks: listed twice: caption"),
    (["--tasks", "caption", "--split", "nosuch"], "missing instances annotation file for split 'nosuch'"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_setting_is_one_line_before_any_model(capsys, tiny_vlm_dir, world_dir, tmp_path, args, message):
    """Nothing is loaded or written: no output dir (not even run.json), no store."""
    out, store = tmp_path / "out", tmp_path / "store"
    rc, lines = main_run(capsys, "--ckpt", str(tiny_vlm_dir), "--data-root", str(world_dir), "--output", str(out),
                         "--store", str(store), *args)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("evalsuite: error: ") and message in lines[0], lines[0]
    assert not out.exists() and not store.exists()


@pytest.mark.parametrize("task", ["caption", "chair"])
def test_a_split_without_images_is_refused_not_scored(capsys, tiny_vlm_dir, world_dir, tmp_path, task):
    """0 images would give CHAIRs = CHAIRi = 0 (a perfect score) from nothing: exit 2, nothing stored."""
    empty = tmp_path / "empty"
    (empty / "annotations").mkdir(parents=True)
    for kind in ("instances", "captions"):
        data = json.loads((world_dir / "annotations" / f"{kind}_val.json").read_text())
        data.update(images=[], annotations=[])
        (empty / "annotations" / f"{kind}_val.json").write_text(json.dumps(data))
    rc, lines = main_run(capsys, "--ckpt", str(tiny_vlm_dir), "--tasks", task, "--data-root", str(empty),
                         "--output", str(tmp_path / "out"), "--store", str(tmp_path / "store"))
    assert rc == 2 and lines == [f"evalsuite: error: {task}: split 'val' of {empty} has no images"]
    assert not (tmp_path / "out").exists() and not (tmp_path / "store").exists()


@pytest.mark.parametrize("yaml_text, message", [
    ('batch_size: "3"\n', "batch_size: expected an int, got the string '3'"),
    ("chair:\n  n_imagez: 3\n", "unknown key 'chair.n_imagez' (did you mean 'chair.n_images'?)"),
    ("tasks: [chair]\nchair:\n  n_images: 0\n", "chair.n_images: must be >= 1, got 0"),
    ("lmms:\n  gen_kwargs: {temperature: hot}\n", "lmms.gen_kwargs: temperature='hot': expected float"),
    ("iterations: 3\n", "unknown key 'iterations'"),
])
def test_bad_preset_names_the_file_and_key(capsys, tiny_vlm_dir, world_dir, tmp_path, yaml_text, message):
    y = tmp_path / "eval.yaml"
    y.write_text(f"tasks: [caption, pope]\n{yaml_text}" if not yaml_text.startswith("tasks") else yaml_text)
    rc, lines = main_run(capsys, "--config", str(y), "--ckpt", str(tiny_vlm_dir), "--data-root", str(world_dir),
                         "--output", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"evalsuite: error: {y}: {message}"), lines
    assert not (tmp_path / "out").exists()


def test_no_data_root_is_refused_naming_both_flags(capsys, tiny_vlm_dir, tmp_path):
    """Without --data-root a checkpoint is never silently scored on the synthetic world."""
    rc, lines = main_run(capsys, "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--output", str(tmp_path / "o"))
    assert rc == 2 and len(lines) == 1
    assert "--data-root" in lines[0] and "--world" in lines[0] and lines[0].startswith("evalsuite: error:")
    rc, lines = main_run(capsys, "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--world", "--data-root",
                         str(tmp_path))
    assert rc == 2 and lines == ["evalsuite: error: command line: data_root: pass --data-root DIR or --world, not both"]


@pytest.mark.slow
def test_world_is_the_opt_in_synthetic_data(tiny_vlm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    res = cli_inprocess("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--world", "--limit", "2",
                        "--max-new-tokens", "4", "--store", str(tmp_path / "s"), "--output", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr[-2000:]
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["config"]["world"] is True and run["data_root"] == str(tmp_path / "cache" / "evalsuite" / "world-seed0-600")


def _run(capsys, ckpt, world, out, store, *extra) -> tuple[int, list[str]]:
    return main_run(capsys, "--ckpt", str(ckpt), "--tasks", "caption", "--data-root", str(world), "--limit", "2",
                    "--max-new-tokens", "4", "--batch-size", "2", "--output", str(out), "--store", str(store), *extra)


def test_output_dir_belongs_to_one_run(capsys, tiny_vlm_dir, world_dir, tmp_path):
    """Same settings: the run resumes under its run id (nothing regenerated or stored twice). Other
    settings, a foreign non-empty dir, or a dir another process is writing: one line, files untouched."""
    out, store = tmp_path / "out", tmp_path / "store"
    assert _run(capsys, tiny_vlm_dir, world_dir, out, store) == (0, [])
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    before = files(out, store)
    assert _run(capsys, tiny_vlm_dir, world_dir, out, store) == (0, [])
    assert json.loads((out / "run.json").read_text())["run_id"] == run_id
    assert sorted(p.name for p in (store / "metrics").iterdir()) == [f"{run_id}-caption.parquet"]
    assert files(store) == {k: v for k, v in before.items() if k.startswith(str(store))}

    rc, lines = _run(capsys, tiny_vlm_dir, world_dir, out, store, "--limit", "3")
    assert rc == 2 and lines == [f"evalsuite: error: --output {out}: holds run {run_id} of another configuration "
                                 "(limit differ); pass another directory, or the same settings to resume it"]
    assert files(out, store) == before

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    rc, lines = _run(capsys, tiny_vlm_dir, world_dir, foreign, store)
    assert rc == 2 and len(lines) == 1 and f"--output {foreign}: not empty and not an evalsuite run" in lines[0]
    assert files(foreign) == {str(foreign / "notes.txt"): b"keep me".hex()}

    import fcntl
    import os

    fd = os.open(out / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)       # another process writing into OUT
    try:
        rc, lines = _run(capsys, tiny_vlm_dir, world_dir, out, store)
    finally:
        os.close(fd)
    assert rc == 2 and lines == [f"evalsuite: error: --output {out}: another evalsuite run is writing there now"]
    assert files(out, store) == before


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_kill_9_mid_task_then_rerun_regenerates_and_duplicates_nothing(tiny_vlm_dir, world_dir, tmp_path):
    """caption (8 answers) finishes and is stored; chair (8 other answers: chair.max_new_tokens differs) is
    killed with SIGKILL after >= 2 of its batches of 1. The same command again: caption is not run or
    stored again, chair generates only its missing answers, and the store holds each task once."""
    out, store = tmp_path / "out", tmp_path / "store"
    cmd = [sys.executable, "-m", "evalsuite.cli", "run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption,chair",
           "--data-root", str(world_dir), "--limit", "8", "--batch-size", "1", "--max-new-tokens", "24",
           "chair.max_new_tokens=16", "chair.n_boot=10", "--output", str(out), "--store", str(store)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cache = None
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        cache = cache or next((store / ".resume" / "own").glob("*/answers.rank0.jsonl"), None)
        if cache is not None and len(_lines(cache)) >= 8 + 2:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    kept = _lines(cache)
    assert 10 <= len(kept) < 16
    assert [p.name.split("-")[-1] for p in (store / "metrics").iterdir()] == ["caption.parquet"]

    again = cli_inprocess(*cmd[3:])   # the same command, in this process (a second interpreter's imports saved)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "caption: already in the store" in again.stderr
    after = _lines(cache)
    assert after[:len(kept)] == kept and len(after) == 16          # only chair's missing answers generated
    assert len({r["key"] for r in after}) == 16                     # no answer generated twice
    from evalsuite.store import Store

    s = Store(store).snapshot()
    assert sorted(s.runs()["tasks"]) == ["caption", "chair"]        # each task stored once
    samples = s.samples()
    assert samples.groupby("task").size().to_dict() == {"caption": 8, "chair": 8}
    assert not samples.duplicated(["task", "key"]).any()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["chair"]["metrics"] and summary["caption"]["metrics"]
