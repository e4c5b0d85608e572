"""Training output folders are as safe as evaluation's (findings-reliability-2.md probes TC, X3, X6, G4, G5):
one run per `--output_dir` (flock; another configuration refused unless resuming), a `merged/` folder the
project did not write is never replaced, the merged checkpoint gets the process umask, SIGINT/SIGTERM are
one line and exit 130/143, and the metrics log keeps its history across a resume."""
from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.reliability.helpers import error_lines, snapshot
from training.train import main as train_main

TINY_YAML = str(REPO / "configs" / "train" / "tiny_cpu.yaml")


@pytest.fixture(scope="module")
def pairs(world_dir, tmp_path_factory):
    caps = json.loads((world_dir / "annotations" / "captions_train.json").read_text())
    files = {im["id"]: f"images/train/{im['file_name']}" for im in caps["images"]}
    first = {}
    for a in caps["annotations"]:
        first.setdefault(a["image_id"], a["caption"])
    items = [(files[i], c) for i, c in sorted(first.items())][:8]
    p = tmp_path_factory.mktemp("pairs") / "pairs.json"
    p.write_text(json.dumps([{"image": img, "prompt": "describe the image.", "chosen": c,
                              "rejected": items[(i + 1) % len(items)][1]} for i, (img, c) in enumerate(items)]))
    return p


def args(tiny_vlm_dir, world_dir, pairs, out, *extra):
    return ["--config", TINY_YAML, "--model_name_or_path", str(tiny_vlm_dir), "--data_path", str(pairs),
            "--image_root", str(world_dir), "--output_dir", str(out), *extra]


def _one_line(capsys, rc, expect):
    lines = error_lines(capsys.readouterr().err)
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("train.py: error: ") and expect in lines[0], lines
    return lines[0]


def test_TC_X6_second_run_of_another_config_is_refused_and_merged_gets_the_umask(tiny_vlm_dir, world_dir, pairs,
                                                                                   tmp_path, capsys):
    """TC: a second training of another configuration into a used --output_dir is refused (the first
    run's results stay); the same command again is the same run. X6: merged/ is 0755 / files 0644."""
    out = tmp_path / "tr"
    old = os.umask(0o022)
    try:
        assert train_main(args(tiny_vlm_dir, world_dir, pairs, out)) == 0
    finally:
        os.umask(old)
    assert oct(os.stat(out / "merged").st_mode & 0o777) == "0o755"
    assert oct(os.stat(out / "merged" / "model.safetensors").st_mode & 0o777) == "0o644"
    capsys.readouterr()
    before = snapshot(out)
    rc = train_main(args(tiny_vlm_dir, world_dir, pairs, out, "--learning_rate", "0.02"))
    _one_line(capsys, rc, "holds a training run of another configuration (learning_rate differ)")
    assert snapshot(out) == before


def test_TC_concurrent_training_into_one_output_dir_is_refused(tiny_vlm_dir, world_dir, pairs, tmp_path, capsys):
    """TC: while a run holds --output_dir (its flock), a second run there is one line, exit 2."""
    out = tmp_path / "tr"
    out.mkdir()
    fd = os.open(out / ".lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        rc = train_main(args(tiny_vlm_dir, world_dir, pairs, out))
    finally:
        os.close(fd)
    _one_line(capsys, rc, "another training run is writing there now")
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


def test_X3_user_merged_folder_is_never_deleted(tiny_vlm_dir, world_dir, pairs, tmp_path, capsys):
    """X3: an existing merged/ holding the user's files is refused before training; nothing is deleted."""
    out = tmp_path / "tr"
    (out / "merged").mkdir(parents=True)
    (out / "merged" / "mine.txt").write_text("mine")
    (out / "precious.txt").write_text("mine")
    before = snapshot(out)
    rc = train_main(args(tiny_vlm_dir, world_dir, pairs, out))
    _one_line(capsys, rc, "was not written by evalsuite")
    assert snapshot(out) == before


def test_G4_G5_metrics_history_is_kept_across_resume(tiny_vlm_dir, world_dir, pairs, tmp_path):
    """G4/G5: a run stopped after checkpoint-2 and resumed with --resume_from_checkpoint true logs steps
    1..4 in metrics.jsonl, and the manifest's first metrics row is step 1."""
    out = tmp_path / "tr"
    assert train_main(args(tiny_vlm_dir, world_dir, pairs, out, "--save_strategy", "steps", "--save_steps", "2")) == 0
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert train_main(args(tiny_vlm_dir, world_dir, pairs, out, "--save_strategy", "steps", "--save_steps", "2",
                               "--max_steps", "4", "--resume_from_checkpoint", "true")) == 0
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]   # printed 4x before
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4], rows
    man = json.loads((out / "merged" / "evalsuite.json").read_text())
    assert man["extra"]["metrics"]["first"]["step"] == 1


@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_G4_G5_signal_is_one_line(sig, code, word, capsys):
    """G4/G5 (the exit): SIGINT / SIGTERM inside training's guard is one line and exit 130 / 143."""
    from evalsuite.interrupts import interrupt_exit

    with pytest.raises(SystemExit) as e:
        with interrupt_exit("train.py", " (hint)"):
            os.kill(os.getpid(), sig)
            time.sleep(5)
    assert e.value.code == code
    assert error_lines(capsys.readouterr().err) == [f"train.py: {word} (hint)"]


@pytest.mark.slow
def test_G4_sigint_during_train_py_is_one_line_exit_130(tiny_vlm_dir, world_dir, pairs, tmp_path):
    """G4 with the real entry point: SIGINT after checkpoint-2 exists; exit 130, one line, no traceback."""
    out = tmp_path / "tr"
    proc = subprocess.Popen([sys.executable, str(REPO / "training" / "train.py"),
                             *args(tiny_vlm_dir, world_dir, pairs, out, "--max_steps", "2000", "--save_strategy",
                                   "steps", "--save_steps", "2")],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 300   # start-up on a loaded machine; the signal waits for checkpoint-2
    while not (out / "checkpoint-2").is_dir() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    if not (out / "checkpoint-2").is_dir():   # else the SIGINT below would test another moment of the run
        proc.kill()
        pytest.fail(f"no checkpoint-2 (exit {proc.poll()}): {proc.communicate()[1][-2000:]}")
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    # the line may follow a progress bar that has no newline yet
    # save_on_signal (default): the step under way ends and is saved as a checkpoint (training/signals.py)
    lines = [ln[ln.index("train.py:"):] for ln in err.splitlines() if "train.py:" in ln]
    assert len(lines) == 1 and re.fullmatch(
        rf"train\.py: interrupted at step (\d+): saved {re.escape(str(out))}/checkpoint-\1; "
        r"continue with --resume_from_checkpoint true", lines[0]), lines
