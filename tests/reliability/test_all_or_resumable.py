"""`evalsuite run` is all-or-resumable (findings-reliability-2.md probes D15, H17, H30, DF2, C1/C3): every
check that can fail runs before the output directory is claimed; a failure after generation is one line
and the same command resumes into the store; the "already stored" decision and the store write for one
(checkpoint, eval_key) are made under one store lock."""
from __future__ import annotations

import errno
import json
import multiprocessing
import shutil

import pytest

from evalsuite.store import Store
from evalsuite.types import MetricValue, TaskResult
from tests.reliability.helpers import error_lines


def _main(capsys, *argv) -> tuple[int, list[str], str]:
    from evalsuite.cli import main

    rc = main(["run", *argv])
    err = capsys.readouterr().err
    return rc, error_lines(err), err


def _run_args(ck, world_dir, tmp_path, *extra):
    return ["--ckpt", str(ck), "--data-root", str(world_dir), "--tasks", "caption", "--limit", "2",
            "--store", str(tmp_path / "st"), "--output", str(tmp_path / "o"), *extra]


def test_D15_non_vlm_checkpoint_leaves_no_output_dir(capsys, tiny_vlm_dir, world_dir, tmp_path):
    """D15: a text-only (llama) checkpoint is one line, exit 2, and no <out>/run.json or .lock is left."""
    ck = tmp_path / "llama"
    shutil.copytree(tiny_vlm_dir, ck)
    cfg = json.loads((ck / "config.json").read_text())
    text = {**cfg["text_config"], "model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    (ck / "config.json").write_text(json.dumps(text))
    rc, lines, _ = _main(capsys, *_run_args(ck, world_dir, tmp_path))
    assert rc == 2 and len(lines) == 1 and "is not a vision-language model" in lines[0], lines
    assert not (tmp_path / "o").exists() and not (tmp_path / "st").exists()


@pytest.mark.parametrize("flag, value, name", [
    ("--label", "ab\udcffcd", "--label"),
    ("--system-prompt", "sys \udcfe", "inputs.system_prompt"),   # a field the flag sets, as --prompt
    ("--prompt", "describe \udcff", "caption.prompt"),
])
def test_H17_non_utf8_argv_is_one_line_before_the_output_dir(flag, value, name, capsys, tiny_vlm_dir, world_dir,
                                                             tmp_path):
    """H17: argv bytes that are not UTF-8 (lone surrogates in Python) are refused before any work."""
    rc, lines, _ = _main(capsys, *_run_args(tiny_vlm_dir, world_dir, tmp_path, flag, value))
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"evalsuite: error: {name}: not valid UTF-8"), lines
    assert not (tmp_path / "o").exists() and not (tmp_path / "st").exists()


def test_DF2_full_disk_is_one_line_and_leaves_no_lock(capsys, tiny_vlm_dir, world_dir, tmp_path, monkeypatch):
    """DF2: no free space (measured before the claim), or ENOSPC writing run.json: one line, exit 2, no
    output directory holding only `.lock`."""
    import evalsuite.precheck as pre

    real = shutil.disk_usage
    monkeypatch.setattr(pre.shutil, "disk_usage", lambda p: real(p)._replace(free=4096))
    rc, lines, _ = _main(capsys, *_run_args(tiny_vlm_dir, world_dir, tmp_path))
    assert rc == 2 and len(lines) == 1 and "no space left on the device (4096 bytes free)" in lines[0], lines
    monkeypatch.setattr(pre.shutil, "disk_usage", real)

    import evalsuite.files as files

    def enospc(path, data, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(files, "write_json_atomic", enospc)
    rc, lines, _ = _main(capsys, *_run_args(tiny_vlm_dir, world_dir, tmp_path))
    assert rc == 2 and len(lines) == 1 and "cannot write run.json (No space left on device)" in lines[0], lines
    assert not (tmp_path / "o").exists()


def test_H30_store_write_failure_after_generation_resumes_with_the_same_command(capsys, caplog, tiny_vlm_dir,
                                                                                world_dir, tmp_path, monkeypatch):
    """H30: the store writer running out of memory after generation is one line (exit 1) saying the same
    command stores it; that command then stores the result without generating again."""
    real = Store.write_run
    monkeypatch.setattr(Store, "write_run", lambda self, *a, **k: (_ for _ in ()).throw(MemoryError()))
    rc, lines, _ = _main(capsys, *_run_args(tiny_vlm_dir, world_dir, tmp_path))
    assert rc == 1 and len(lines) == 1 and "the same command again stores it" in lines[0], lines
    assert not (tmp_path / "st" / "metrics").exists() or not any((tmp_path / "st" / "metrics").iterdir())
    monkeypatch.setattr(Store, "write_run", real)
    with caplog.at_level("INFO"):
        rc, lines, err = _main(capsys, *_run_args(tiny_vlm_dir, world_dir, tmp_path))
    assert rc == 0 and lines == [], err[-2000:]
    assert "answers: 2 of 2 taken from the resume cache, 0 to generate" in caplog.text
    assert len(list((tmp_path / "st" / "metrics").glob("*.parquet"))) == 1


def _result() -> TaskResult:
    s = {"key": "val:1", "image_id": 1, "image": "i.png", "prompt": "p", "answer": "a"}
    return TaskResult("caption", "1", [MetricValue("answer_words_mean", 1.0, True, n=1)], samples=[s],
                      identity={"task": "caption"})


def _write_once(path: str, i: int, q) -> None:
    store = Store(path)
    q.put(store.write_run_once({"run_id": f"r{i}", "ckpt_hash": "h"}, [_result()], "h"))


def test_C1_C3_concurrent_runs_store_one_result_per_eval_key(tmp_path):
    """C1/C3: four processes storing the same (checkpoint, eval_key) at once: one metrics file, and every
    process is told the id of the run that holds it; --rerun (dedup off) stores again."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_write_once, args=(str(tmp_path / "st"), i, q)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    got = {q.get(timeout=5) for _ in procs}
    files = list((tmp_path / "st" / "metrics").glob("*.parquet"))
    assert len(files) == 1 and got == {files[0].stem}
    Store(tmp_path / "st").write_run_once({"run_id": "again", "ckpt_hash": "h"}, [_result()], "h", dedup=False)
    assert len(list((tmp_path / "st" / "metrics").glob("*.parquet"))) == 2
