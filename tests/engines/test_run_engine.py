"""`evalsuite run --engine vllm` end to end on the tiny world: a worker killed mid-run is one line and the
same command resumes; the stored scores and answers are the HF engine's (caption, chair, pope; mmhal with
a fake judge, hallusion, amber_g, amber_d); the engine is part of every result's identity, so HF's answers and results
in the same store are neither reused nor mixed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.integration.test_amber_run import PIPELINE as AMBER_PIPELINE
from tests.integration.test_amber_run import amber_world  # noqa: F401  (fixture)
from tests.integration.test_hallusion_run import _verdict, hb_data  # noqa: F401  (fixture)
from tests.integration.test_mmhal_run import mmhal_data  # noqa: F401  (fixture)
from tests.unit.test_amber import nltk_ready  # noqa: F401  (fixture)

TASKS = "caption,chair,pope"


def _args(ckpt, world, store, out, engine):
    return ["run", "--ckpt", str(ckpt), "--data-root", str(world), "--tasks", TASKS, "--engine", engine,
            "--store", str(store), "--output", str(out), "--limit", "6", "--batch-size", "1",
            "--max-new-tokens", "12", "--chair-images", "6"]


def _worker_pid(parent: int) -> int | None:
    """The vllm_worker.py process started by `parent` (a child of it), from /proc."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"vllm_worker.py" in cmd:
            return int(d.name)
    return None


def _session_alive(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`: what a killed worker might leave (its engine processes)."""
    alive = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                alive.append(int(d.name))
    return alive


def _results(out: Path) -> dict:
    tasks = {}
    for name in TASKS.split(","):
        res = json.loads((out / name / "result.json").read_text())
        samples = [json.loads(line) for line in (out / name / "samples.jsonl").read_text().splitlines()]
        tasks[name] = {"metrics": {m["metric"]: m["value"] for m in res["metrics"]}, "eval_key": res["eval_key"],
                       "identity": res["identity"], "answers": [s.get("answer") for s in samples]}
    return tasks


def test_run_vllm_killed_resumes_and_stores_hf_scores(vllm_spec, vllm_ckpts, world_dir, tmp_path):
    ckpt, store = vllm_ckpts["llava"], tmp_path / "store"
    env = {"EVALSUITE_VLLM_PYTHON": vllm_spec.python}
    hf = run_cli(*_args(ckpt, world_dir, store, tmp_path / "hf", "hf"), env=env)
    assert hf.returncode == 0, hf.stderr[-3000:]

    # the vLLM run, its worker killed once the first answer is in the resume cache
    cmd = [sys.executable, "-m", "evalsuite.cli", *_args(ckpt, world_dir, store, tmp_path / "vllm", "vllm")]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    cache = store / ".resume" / "own"

    def answered() -> int:
        return sum(len(p.read_text().splitlines()) for p in cache.glob("*/*.jsonl")) if cache.is_dir() else 0

    hf_answers = answered()  # HF's answers are in the same cache: only one beyond them is the vLLM worker's
    assert hf_answers > 0
    killed, deadline = None, time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        if answered() > hf_answers:
            killed = _worker_pid(proc.pid)
            if killed:
                os.kill(killed, signal.SIGKILL)
                break
        time.sleep(0.05)
    _, err = proc.communicate(timeout=300)
    assert killed, err[-3000:]
    assert proc.returncode == 1, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1].startswith("evalsuite: failed: vLLM worker exited (code -9)"), lines[-5:]
    assert "resume" in lines[-1] and "Traceback" not in err
    assert _session_alive(killed) == []  # the worker's engine processes went with it

    again = run_cli(*_args(ckpt, world_dir, store, tmp_path / "vllm", "vllm"), env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "taken from the resume cache" in again.stderr

    ours, ref = _results(tmp_path / "vllm"), _results(tmp_path / "hf")
    for name in ref:
        assert ours[name]["metrics"] == ref[name]["metrics"], name
        assert ours[name]["answers"] == ref[name]["answers"], name
        # another engine, another result: never reused from, or mixed with, the HF one in the store
        assert ours[name]["eval_key"] != ref[name]["eval_key"], name
        assert ours[name]["identity"]["engine"]["name"] == "vllm" and "engine" not in ref[name]["identity"]
    summary = json.loads((tmp_path / "vllm" / "summary.json").read_text())
    assert not any(t.get("reused") for t in summary.values())


def test_judged_tasks_and_amber_on_vllm_equal_hf(vllm_spec, vllm_ckpts, mmhal_data, hb_data, amber_world,  # noqa: F811
                                                 nltk_ready, tmp_path):  # noqa: F811
    """mmhal and hallusion (judged by the fake judge) and amber_g/amber_d with --engine vllm for the model
    under test: vLLM's answers, hence AMBER's scores and the judge's requests, are HF's; the judge is not
    asked again (its replies are cached by request), and each result is the vLLM engine's own (another
    eval_key)."""
    import nltk

    from tests.judge_fake import FakeJudge, rating_reply

    ckpt, store = vllm_ckpts["llava"], tmp_path / "store"
    data, root = mmhal_data
    hb, hb_root, hb_records = hb_data
    tasks = ("mmhal", "hallusion", "amber_g", "amber_d")
    env = {"EVALSUITE_VLLM_PYTHON": vllm_spec.python, "NLTK_DATA": ":".join(nltk.data.path)}

    def reply(messages):   # hallusion's verdict by the answer's words, mmhal's rating likewise
        return _verdict(messages) if "\nPrediction answer:" in messages[-1]["content"] else rating_reply(messages)

    asked = 4 + sum(r["filename"] is not None for r in hb_records)   # mmhal's 4; hallusion's questions with an image
    with FakeJudge(models=("judge-a",), reply=reply) as fake:
        def run(engine):
            return run_cli("run", "--ckpt", str(ckpt), "--tasks", ",".join(tasks), "--engine", engine,
                           "--store", str(store), "--output", str(tmp_path / engine), "--batch-size", "1",
                           "--max-new-tokens", "8", f"mmhal.data={data}", f"mmhal.image_root={root}", "mmhal.n_boot=0",
                           f"hallusion.data={hb}", f"hallusion.image_root={hb_root}", "hallusion.n_boot=0",
                           "--judge", fake.url, "--judge-model", "judge-a", f"amber.data_root={amber_world}",
                           f"amber.image_root={amber_world / 'image'}", f"amber.spacy_model={AMBER_PIPELINE}",
                           "amber.n_boot=0", env=env, timeout=900)

        hf = run("hf")
        assert hf.returncode == 0, hf.stderr[-3000:]
        assert len(fake.requests) == asked
        vllm = run("vllm")
        assert vllm.returncode == 0, vllm.stderr[-3000:]
        assert len(fake.requests) == asked   # the same answers: the same judge requests, served from its cache

    def results(out: Path) -> dict:
        summary = json.loads((out / "summary.json").read_text())
        return {t: {"metrics": {(m["metric"], m["variant"]): m["value"] for m in summary[t]["metrics"]},
                    "eval_key": summary[t]["eval_key"], "identity": summary[t]["identity"], "extra": summary[t]["extra"],
                    "answers": [json.loads(line)["answer"] for line in (out / t / "samples.jsonl").read_text().splitlines()]}
                for t in tasks}

    ours, ref = results(tmp_path / "vllm"), results(tmp_path / "hf")
    assert [len(ref[t]["answers"]) for t in tasks] == [4, asked - 4, 3, 18]
    assert any(a.strip() for t in tasks for a in ref[t]["answers"])
    for t in tasks:
        assert ours[t]["answers"] == ref[t]["answers"], t
        assert ours[t]["metrics"] == ref[t]["metrics"], t
        assert ours[t]["eval_key"] != ref[t]["eval_key"], t
        assert ours[t]["identity"]["engine"]["name"] == "vllm" and "engine" not in ref[t]["identity"], t
    assert ours["mmhal"]["extra"]["judge_requests"] == {"asked": 0, "cached": 4}
    assert ours["hallusion"]["extra"]["judge_requests"] == {"asked": 0, "cached": asked - 4}
    assert {"aAcc", "fAcc", "qAcc", "aAcc_VD", "aAcc_VS"} <= {m for m, _ in ref["hallusion"]["metrics"]}
    for t in ("mmhal", "hallusion"):
        assert ours[t]["identity"]["judge"] == ref[t]["identity"]["judge"], t
