"""The CSR loop end to end on the tiny kit + synthetic world: 2 iterations, killed once mid-iteration
(SIGKILL of the real entry point in a subprocess), resumed, ending with two loadable checkpoints and
pair statistics for both iterations in the results store."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def csr_setup(tmp_path, tiny_vlm_dir, tiny_clip_dir, world_dir):
    images = world_dir / "images" / "train"
    files = sorted(images.iterdir())[:10]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.stem, "image": p.name, "question": "Describe the image."}) + "\n"
                               for p in files))
    overrides = [f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
                 f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}"]
    return tmp_path, overrides


def _kill_after(marker: Path, overrides: list[str], timeout: float = 600.0) -> None:
    """Start the loop as a subprocess and SIGKILL it as soon as `marker` exists (the deadline only ends a
    loop that never gets there: generous, as a loaded 2-core machine can take minutes)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "training/train.py", "--config", "configs/csr_tiny.yaml",
                             *overrides], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + timeout
    try:
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"loop exited early ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
            if time.time() > deadline:
                pytest.fail("loop did not reach the kill point in time")
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()


@pytest.mark.slow
def test_two_iterations_killed_and_resumed(csr_setup):
    from evalsuite.manifest import checkpoint_hash, read_manifest
    from evalsuite.models.vlm import load_vlm
    from evalsuite.store import Store
    from training.csr.config import load_config
    from training.csr.loop import run_csr

    tmp, overrides = csr_setup
    it1 = tmp / "run" / "iter_1"
    _kill_after(it1 / "score.done", overrides)
    assert (it1 / "trees.jsonl").exists() and not (it1 / "train.done").exists()
    trees_mtime = (it1 / "trees.jsonl").stat().st_mtime_ns

    merged = run_csr(load_config(REPO / "configs" / "csr_tiny.yaml", overrides))

    # resumed, not restarted: the killed run's trees were kept
    assert (it1 / "trees.jsonl").stat().st_mtime_ns == trees_mtime
    assert merged == [str(tmp / "run" / f"iter_{t}" / "merged") for t in (1, 2)]
    for t, ckpt in enumerate(merged, start=1):
        d = tmp / "run" / f"iter_{t}"
        for stage in ("generate", "score", "pairs", "train"):
            assert (d / f"{stage}.done").exists()
        man = read_manifest(ckpt)
        assert man["iteration"] == t and man["method"] == "csr"
        assert man["parent"] == (str(overrides[0].split("=", 1)[1]) if t == 1 else merged[0])
        loop_man = json.loads((d / "manifest.json").read_text())
        assert loop_man["iteration"] == t and len(loop_man["pairs_hash"]) == 64
        vlm = load_vlm(ckpt, device="cpu")
        assert vlm.model.config.model_type == "llava"
        pairs = json.loads((d / "pairs.json").read_text())
        assert pairs and all(p["conversations"][0]["value"] == "<image>\nDescribe the image." for p in pairs)
        assert all(p["conversations"][1]["value"] != p["rejected_conversations"][1]["value"] for p in pairs)
        # DPO step 0 with LoRA B = 0: policy == reference, loss ln 2 (docs/csr-method.md §10.2)
        first = json.loads((d / "train" / "metrics.jsonl").read_text().splitlines()[0])
        assert first["loss"] == pytest.approx(0.6931, abs=1e-3)

    store = Store(tmp / "store")
    # each iteration's trainer log is a csr_train run on the checkpoint it trained, M_t, one record a step
    train = store.snapshot().metrics()
    train = train[train["task"] == "csr_train"]
    assert sorted(set(train["iteration"])) == [1, 2] and set(train["metric"]) == {
        "final_loss", "final_reward_margin", "final_reward_accuracy"}
    for t, ckpt in enumerate(merged, start=1):
        run = train[train["iteration"] == t]
        assert set(run["ckpt_hash"]) == {checkpoint_hash(ckpt)} and run["run_id"].nunique() == 1
        steps = [json.loads(x) for x in (tmp / "run" / f"iter_{t}" / "train" / "metrics.jsonl").read_text().splitlines()]
        records = store.snapshot().sample_records(task="csr_train", run_id=run["run_id"].iloc[0])
        assert [r["step"] for r in records] == [r["step"] for r in steps if "loss" in r]
        assert records[0]["loss"] == pytest.approx(0.6931, abs=1e-3)
    rows = store.snapshot().metrics()
    rows = rows[rows["task"] == "csr_pairs"]
    # iteration t's pairs sit under their generator M_{t-1} (iterations 0 and 1), named in `generator`
    assert sorted(set(rows["iteration"])) == [0, 1]
    assert (rows["generator"] == rows["ckpt_hash"]).all()
    assert len(rows) == 14  # 7 metrics x 2 iterations, each written once despite the kill
    # the stored statistics describe exactly the pairs the next iteration trains on: same ids, and the
    # gap is the mean of their per-pair reward gaps (a stat from another pair set or a stale file differs)
    for it in (0, 1):
        r = rows[rows["iteration"] == it]
        vals = dict(zip(r["metric"], r["value"]))
        recs = store.snapshot().sample_records(task="csr_pairs", run_id=r["run_id"].iloc[0])
        trained = json.loads((tmp / "run" / f"iter_{it + 1}" / "pairs.json").read_text())
        assert [x["id"] for x in recs] == [p["id"] for p in trained] and vals["num_pairs"] == len(trained)
        assert vals["reward_gap"] == pytest.approx(
            sum(x["chosen_reward"] - x["rejected_reward"] for x in recs) / len(recs))
        assert vals["chosen_reward_mean"] == pytest.approx(sum(x["chosen_reward"] for x in recs) / len(recs))
