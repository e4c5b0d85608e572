"""The first SIGTERM / SIGINT during training saves checkpoint-<step> and exits 143 / 130 (training/signals.py,
`save_on_signal`); `--save_on_signal false` is the old behaviour (stop at once, nothing saved beyond the
periodic checkpoints). The signal is sent once the first step is logged, to a run of max_steps well
beyond it, with periodic saving off (`save_strategy: no` in the tiny preset), so any checkpoint-N is the
signal's."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from training.train import main as train_main

REPO = Path(__file__).resolve().parents[2]
TINY_YAML = str(REPO / "configs" / "train" / "tiny_cpu.yaml")
MAX_STEPS = 60  # ~13 steps/s on one CPU thread: a signal right after step 1 lands long before the end
CSR_STEPS = 30  # in-process: the signal follows step 1 within milliseconds


def _argv(tiny_vlm_dir, world_dir, pairs, out, *extra):
    return ["--config", TINY_YAML, "--model_name_or_path", str(tiny_vlm_dir), "--data_path", str(pairs),
            "--image_root", str(world_dir), "--output_dir", str(out), "--max_steps", str(MAX_STEPS), *extra]


def _first_step_logged(out: Path, steps: int = 1) -> bool:
    log = out / "metrics.jsonl"
    try:
        return sum("loss" in json.loads(x) for x in log.read_text().splitlines() if x.strip()) >= steps
    except (OSError, ValueError):
        return False


def _signal_subprocess(argv, out: Path, sig, tmp_path) -> tuple[int, str]:
    """Run train.py in a subprocess, send `sig` once step 1 is logged; (exit code, stderr)."""
    err = tmp_path / "stderr.txt"
    with open(err, "w") as fh:
        proc = subprocess.Popen([sys.executable, str(REPO / "training" / "train.py"), *argv], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=fh, env={**os.environ, "OMP_NUM_THREADS": "1"})
        try:
            deadline = time.time() + 300   # start-up (imports, model) on a loaded machine; the signal waits for it
            while not _first_step_logged(out):
                assert proc.poll() is None, f"exited before step 1 ({proc.returncode}): {err.read_text()[-2000:]}"
                assert time.time() < deadline, "no step logged in 300 s"
                time.sleep(0.02)
            proc.send_signal(sig)
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return rc, err.read_text()


@contextlib.contextmanager
def _signal_in_process(out: Path, sig, steps: int = 1):
    """Within: send `sig` to this process (the pytest main thread gets it) once `steps` steps are logged in `out`;
    never after the block (a run that failed early must not get a stray signal into the next test)."""
    done = threading.Event()

    def watch():
        while not done.is_set():
            if _first_step_logged(out, steps):
                os.kill(os.getpid(), sig)
                return
            time.sleep(0.005)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()


def _checkpoints(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.name.startswith("checkpoint-"))


def _assert_complete(ckpt: Path, step: int, ranks: int = 1) -> None:
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["global_step"] == step
    weights = list(ckpt.glob("*.safetensors"))
    assert weights and all(w.stat().st_size > 0 for w in weights)
    for name in ("optimizer.pt", "scheduler.pt"):   # resumable, not just the weights
        assert (ckpt / name).is_file(), name
    rng = ["rng_state.pth"] if ranks == 1 else [f"rng_state_{r}.pth" for r in range(ranks)]  # one per rank
    assert sorted(p.name for p in ckpt.glob("rng_state*.pth")) == rng


def _no_leftovers(out: Path, ckpt: Path) -> None:
    """Only what a run with save_steps writes: no temp files, no merged/adapter (the run did not finish)."""
    assert {p.name for p in out.iterdir()} <= {".lock", "train_run.json", "metrics.jsonl", "README.md", ckpt.name}
    names = [p.name for p in out.rglob("*")]
    assert not [n for n in names if "tmp" in n.lower() or n.endswith(".partial") or "incomplete" in n], names


def _logged_steps(out: Path) -> list[int]:
    return [r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_sigterm_saves_checkpoint_exits_143_and_resume_runs_to_the_end(tiny_vlm_dir, world_dir, pairs, tmp_path):
    out = tmp_path / "run"
    argv = _argv(tiny_vlm_dir, world_dir, pairs, out)
    rc, err = _signal_subprocess(argv, out, signal.SIGTERM, tmp_path)
    assert rc == 143, err[-2000:]
    [ckpt] = _checkpoints(out)
    step = int(ckpt.name.split("-")[1])
    assert 1 <= step < MAX_STEPS
    _assert_complete(ckpt, step)
    _no_leftovers(out, ckpt)
    lines = [x for x in err.splitlines() if "train.py:" in x]
    assert lines[-1].endswith(f"train.py: terminated at step {step}: saved {ckpt}; "
                              "continue with --resume_from_checkpoint true"), lines

    assert train_main([*argv, "--resume_from_checkpoint", "true"]) == 0
    assert _logged_steps(out) == list(range(1, MAX_STEPS + 1))
    assert (out / "merged" / "evalsuite.json").is_file()


def test_sigint_during_sft_saves_checkpoint_exits_130(tiny_vlm_dir, world_dir, pairs, tmp_path, capsys):
    out = tmp_path / "sft"
    argv = _argv(tiny_vlm_dir, world_dir, pairs, out, "--method", "sft", "--dataset_name", "vlquery_json",
                 "--data_path", str(pairs.with_name("sft.json")))
    with _signal_in_process(out, signal.SIGINT), pytest.raises(SystemExit) as e:
        train_main(argv)
    assert e.value.code == 130
    [ckpt] = _checkpoints(out)
    step = int(ckpt.name.split("-")[1])
    assert 1 <= step < MAX_STEPS
    _assert_complete(ckpt, step)
    _no_leftovers(out, ckpt)
    assert f"train.py: interrupted at step {step}: saved {ckpt}" in capsys.readouterr().err


def test_signal_save_follows_save_total_limit_and_save_only_model(tiny_vlm_dir, world_dir, pairs, tmp_path, capsys):
    """The signal's save is the Trainer's own: with periodic saves every step, `save_total_limit 1` leaves
    the signal's checkpoint alone (and removes the step before it) and `save_only_model` leaves out
    optimizer, scheduler and RNG state. Such a folder is not resumable (transformers would restart the
    optimizer and LR schedule silently): the line says so, and `--resume_from_checkpoint true` refuses it."""
    out = tmp_path / "limit"
    argv = _argv(tiny_vlm_dir, world_dir, pairs, out, "--save_strategy", "steps", "--save_steps", "1",
                 "--save_total_limit", "1", "--save_only_model", "true")
    with _signal_in_process(out, signal.SIGTERM, steps=3), pytest.raises(SystemExit) as e:
        train_main(argv)
    assert e.value.code == 143
    [ckpt] = _checkpoints(out)
    step = int(ckpt.name.split("-")[1])
    assert step >= 3
    assert (f"train.py: terminated at step {step}: saved {ckpt} (weights only (save_only_model): not resumable)"
            in capsys.readouterr().err)
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == step
    assert (ckpt / "adapter_model.safetensors").is_file()
    assert not [p.name for p in ckpt.iterdir() if p.suffix in (".pt", ".pth")]

    assert train_main([*argv, "--resume_from_checkpoint", "true"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        (f"train.py: error: resume_from_checkpoint: true, but {ckpt}: weights only (save_only_model): not resumable "
         "(no optimizer/scheduler state)")]


def test_signal_on_an_eval_step_that_is_not_the_best_still_saves(tiny_vlm_dir, world_dir, pairs, tmp_path, capsys):
    """`save_strategy: best` with an evaluation every step and a learning rate too small to move any weight
    (1e-30: the eval loss is the same at every step, so only step 1 is a new best): the Trainer drops the
    save at the signal's step (should_save = is_new_best_metric); the signal's save is made all the same."""
    out = tmp_path / "best"
    argv = _argv(tiny_vlm_dir, world_dir, pairs, out, "--eval_split", "0.25", "--eval_strategy", "steps",
                 "--eval_steps", "1", "--save_strategy", "best", "--metric_for_best_model", "eval_loss",
                 "--learning_rate", "1e-30")
    with _signal_in_process(out, signal.SIGTERM, steps=3), pytest.raises(SystemExit) as e:
        train_main(argv)
    assert e.value.code == 143
    first, ckpt = _checkpoints(out)                # step 1's (the best) and the signal's
    step = int(ckpt.name.split("-")[1])
    assert first.name == "checkpoint-1" and step >= 3
    _assert_complete(ckpt, step)
    assert f"train.py: terminated at step {step}: saved {ckpt}" in capsys.readouterr().err
    evals = [r["eval_loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
             if "eval_loss" in r]
    assert len(evals) >= step and len(set(evals)) == 1   # no later step was a new best


def test_switch_off_stops_at_once_without_a_checkpoint(tiny_vlm_dir, world_dir, pairs, tmp_path, capsys):
    """In-process (the subprocess path is the test above's): the old behaviour, interrupt_exit's line."""
    out = tmp_path / "off"
    with _signal_in_process(out, signal.SIGTERM), pytest.raises(SystemExit) as e:
        train_main(_argv(tiny_vlm_dir, world_dir, pairs, out, "--save_on_signal", "false"))
    assert e.value.code == 143
    assert not _checkpoints(out) and not (out / "merged").exists()
    lines = [x for x in capsys.readouterr().err.splitlines() if "train.py:" in x]
    # no checkpoint to resume: the advice is the same command, which starts the run again
    assert f"train.py: terminated (no checkpoint saved in {out}; start again with the same command: " \
           "python training/train.py " in lines[-1] and "--resume_from_checkpoint" not in lines[-1], lines


def test_csr_signal_in_dpo_stage_saves_and_the_rerun_continues(tiny_vlm_dir, tiny_clip_dir, world_dir, tmp_path):
    """The CSR loop's DPO stage (trees, scores and pairs already done): SIGTERM saves
    iter_1/train/checkpoint-N and exits 143 with no train.done; the rerun continues from it to the end."""
    from evalsuite.files import sha256_file
    from training.csr.config import load_config
    from training.csr.loop import run_csr

    images = world_dir / "images" / "train"
    files = sorted(p.name for p in images.iterdir())[:8]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f, "image": f, "question": "Describe the image."}) + "\n"
                               for f in files))
    run = tmp_path / "run"
    cfg = load_config(REPO / "configs" / "csr_tiny.yaml", [
        f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
        f"output_dir={run}", f"store={tmp_path / 'store'}", "iterations=1", f"train.max_steps={CSR_STEPS}",
        "train.per_device_train_batch_size=2"])
    d = run / "iter_1"
    d.mkdir(parents=True)
    human = {"from": "human", "value": "<image>\nDescribe the image."}
    (d / "pairs.json").write_text(json.dumps([
        {"id": f, "image": f, "conversations": [human, {"from": "gpt", "value": f"a picture {i}."}],
         "rejected_conversations": [human, {"from": "gpt", "value": f"a cat and a dog {i}."}]}
        for i, f in enumerate(files)]))
    for stage in ("generate", "score"):
        (d / f"{stage}.done").write_text("{}")
    (d / "pairs.done").write_text(json.dumps({"pairs": len(files), "skipped": {},
                                              "pairs_hash": sha256_file(d / "pairs.json")}))

    with _signal_in_process(d / "train", signal.SIGTERM), pytest.raises(SystemExit) as e:
        run_csr(cfg)
    assert e.value.code == 143 and not (d / "train.done").exists() and not (d / "merged").exists()
    [ckpt] = _checkpoints(d / "train")
    step = int(ckpt.name.split("-")[1])
    assert 1 <= step < CSR_STEPS
    _assert_complete(ckpt, step)

    assert run_csr(cfg) == [str(d / "merged")]
    assert (d / "train.done").is_file()
    assert ckpt.is_dir()  # continued from it: a fresh start removes the attempt's train/ folder first
    assert json.loads((d / "manifest.json").read_text())["train_config"]["resume_from_checkpoint"] == str(ckpt)
    assert _logged_steps(d / "train") == list(range(1, CSR_STEPS + 1))


def _children(parent: int) -> dict[int, list[bytes]]:
    """pid -> environment of each child process of `parent` (torchrun's workers)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                out[int(stat.parent.name)] = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
    return out


def _rank_pid(parent: int, rank: int) -> int | None:
    """The pid of torchrun's worker `rank` (a child of `parent` whose environment says RANK=rank)."""
    return next((pid for pid, env in _children(parent).items() if f"RANK={rank}".encode() in env), None)


def _torchrun_signalled(tiny_vlm_dir, world_dir, pairs, tmp_path, send) -> tuple[Path, str]:
    """torchrun, 2 ranks (gloo), max_steps 400: `send(torchrun's pid)` once both ranks logged a step;
    (output_dir, torchrun's stderr). A hung run is killed with its workers."""
    import shutil

    from tests.conftest import free_port, port_taken

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found")
    out = tmp_path / "ddp"
    err = tmp_path / "stderr.txt"
    for attempt in range(3):   # again with another port when torchrun's was taken (tests/conftest.py launch)
        cmd = [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), str(REPO / "training" / "train.py"),
               *_argv(tiny_vlm_dir, world_dir, pairs, out, "--ddp_backend", "gloo", "--max_steps", "400")]
        with open(err, "w") as fh:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=fh,
                                    env={**os.environ, "OMP_NUM_THREADS": "1"})
            try:
                deadline = time.time() + 300
                while not _first_step_logged(out) or not (out / "metrics.rank1.jsonl").is_file():
                    if proc.poll() is not None:
                        break
                    assert time.time() < deadline, "no step logged in 300 s"
                    time.sleep(0.05)
                else:
                    send(proc.pid)
                    proc.wait(timeout=120)
                    return out, err.read_text()
            finally:
                if proc.poll() is None:   # hung: its workers too (torchrun starts them in sessions of their own)
                    workers = list(_children(proc.pid))
                    proc.kill()
                    proc.wait()
                    for pid in workers:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
        text = err.read_text()
        assert port_taken(text) and attempt < 2, text[-3000:]   # exited before both ranks logged a step


@pytest.mark.slow
def test_ddp_signal_to_one_rank_stops_both_at_the_same_step(tiny_vlm_dir, world_dir, pairs, tmp_path):
    """torchrun, 2 ranks (gloo): SIGTERM to rank 1 alone. The flag is OR-reduced at each step end, so both
    ranks stop after the same step, rank 0 writes checkpoint-N and every worker exits 143 (no rank is
    left waiting in a collective: the run ends well within the timeout)."""
    def send(parent):
        pid = _rank_pid(parent, 1)
        assert pid, "rank 1's process not found"
        os.kill(pid, signal.SIGTERM)

    out, text = _torchrun_signalled(tiny_vlm_dir, world_dir, pairs, tmp_path, send)
    [ckpt] = _checkpoints(out)
    step = int(ckpt.name.split("-")[1])
    assert 1 <= step < 400
    _assert_complete(ckpt, step, ranks=2)
    assert f"train.py: terminated at step {step}: saved {ckpt}" in text, text[-3000:]
    rank1 = [r["step"] for r in map(json.loads, (out / "metrics.rank1.jsonl").read_text().splitlines()) if "loss" in r]
    assert _logged_steps(out)[-1] == rank1[-1] == step
    assert "exitcode  : 143" in text or "exitcode: 143" in text, text[-3000:]


@pytest.mark.slow
def test_ddp_slurm_style_signal_reaches_each_worker_twice_and_is_one_request(tiny_vlm_dir, world_dir, pairs,
                                                                              tmp_path):
    """What Slurm does at preemption: SIGTERM to every process of the step, torchrun's agent (which forwards
    it to each worker) and the workers themselves, so each worker gets it twice within milliseconds. The
    copy is the same request (training/signals.py REPEAT_WINDOW_S), not a second "stop at once": the
    checkpoint is saved."""
    def send(parent):
        workers = [_rank_pid(parent, r) for r in (0, 1)]
        assert all(workers), "a worker's process not found"
        for pid in (parent, *workers):
            os.kill(pid, signal.SIGTERM)

    out, text = _torchrun_signalled(tiny_vlm_dir, world_dir, pairs, tmp_path, send)
    [ckpt] = _checkpoints(out)
    step = int(ckpt.name.split("-")[1])
    _assert_complete(ckpt, step, ranks=2)
    assert f"train.py: terminated at step {step}: saved {ckpt}" in text, text[-3000:]
