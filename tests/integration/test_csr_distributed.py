"""The CSR loop's data-parallel path under `torchrun --nproc_per_node 2` (gloo on CPU).

One real iteration (generate -> score -> pairs -> DDP train + merge) of the tiny preset runs in two
torchrun worker processes, and the test checks that data parallelism changes where work runs, not what it computes: each rank generated its own
shard of the prompts (rank r gets prompts r, r+2, ...: disjoint, together all of them), rank 0's
merged trees and the pairs built from them are identical to a single-process run of the same stages
on the same prompts (group beam search is deterministic: same token ids and tree shape, search scores
equal up to float32 rounding; scores and pairs are then byte-identical), and exactly one set of
outputs (one trees.jsonl, one pairs.json, one merged checkpoint, one store run) was written.

This file is also the worker script: `torchrun ... test_csr_distributed.py OVERRIDES...` runs `run_csr`
with the `Dist` it resolves, as training/train.py does.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRESET = REPO / "configs" / "csr_tiny.yaml"
N_PROMPTS = 7  # odd, so the two shards differ in size (4 and 3)


@pytest.fixture()
def csr_inputs(tmp_path, tiny_vlm_dir, tiny_clip_dir, world_dir):
    images = world_dir / "images" / "train"
    files = sorted(images.iterdir())[:N_PROMPTS]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.stem, "image": p.name, "question": "Describe the image."}) + "\n"
                               for p in files))
    common = [f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
              "iterations=1"]
    return tmp_path, [p.stem for p in files], common


def _torchrun(overrides: list[str], timeout: float = 600.0) -> subprocess.CompletedProcess:
    # the timeout ends a hung rank: generous, as 2 ranks share a loaded 2-core machine with another test
    from tests.conftest import launch

    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return launch(lambda port: [str(torchrun), "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                                str(port), __file__, *overrides],
                  cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _single_process(overrides: list[str]) -> Path:
    """generate -> score -> pairs in this process (no RANK/WORLD_SIZE), into its own run dir."""
    from training.csr.config import load_config
    from training.csr.loop import (
        _Models,
        load_prompts,
        stage_generate,
        stage_pairs,
        stage_score,
    )

    cfg = load_config(PRESET, overrides)
    records = load_prompts(cfg.prompts, cfg.limit)
    d = cfg.run_dir / "iter_1"
    d.mkdir(parents=True)
    models = _Models(cfg)
    stage_generate(cfg, models, cfg.model, records, d)
    stage_score(cfg, models, cfg.model, d)
    stage_pairs(cfg, models, cfg.model, 1, d)
    models.release()
    return d


def _assert_same_trees(a: Path, b: Path) -> None:
    """Same prompts, nodes, token ids, texts, statuses and tree shape; search scores equal up to float32
    rounding (a shard is a different batch, so the padded matmuls differ in the last bits: measured
    max |diff| 4.8e-7 on this kit)."""
    ta, tb = ([json.loads(x) for x in p.read_text().splitlines()] for p in (a, b))
    assert [t["id"] for t in ta] == [t["id"] for t in tb]
    for x, y in zip(ta, tb):
        assert {k: v for k, v in x.items() if k != "nodes"} == {k: v for k, v in y.items() if k != "nodes"}
        assert len(x["nodes"]) == len(y["nodes"])
        for nx, ny in zip(x["nodes"], y["nodes"]):
            floats = ("sentence_score", "lm_score")
            assert {k: v for k, v in nx.items() if k not in floats} == {k: v for k, v in ny.items() if k not in floats}
            assert [nx[k] for k in floats] == pytest.approx([ny[k] for k in floats], abs=1e-5)


def _ids(path: Path) -> list[str]:
    return [json.loads(x)["id"] for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_generation_sharded_over_two_ranks(csr_inputs, monkeypatch):
    from evalsuite.manifest import read_manifest
    from evalsuite.store import Store

    tmp, ids, common = csr_inputs
    ddp_run, ddp_store = tmp / "ddp", tmp / "ddp_store"
    proc = _torchrun([*common, f"output_dir={ddp_run}", f"store={ddp_store}"])
    assert proc.returncode == 0, proc.stderr[-4000:]

    d = ddp_run / "iter_1"
    # each rank generated its own shard: rank r holds prompts r, r+2, ..., disjoint and covering all
    shards = [_ids(d / f"trees.rank{r}.jsonl") for r in (0, 1)]
    assert shards == [ids[0::2], ids[1::2]]
    assert not set(shards[0]) & set(shards[1]) and sorted(shards[0] + shards[1]) == sorted(ids)
    for r in (0, 1):
        assert json.loads((d / f"generate.rank{r}.done").read_text()) == {"trees": len(shards[r]), "world": 2}
    assert json.loads((d / "generate.done").read_text()) == {"trees": N_PROMPTS, "ranks": 2}
    assert _ids(d / "trees.jsonl") == ids  # rank 0 merged in prompt order

    # the merged trees and the pairs equal a single-process run of the same stages
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    single = _single_process([*common, f"output_dir={tmp / 'single'}", f"store={tmp / 'single_store'}"])
    _assert_same_trees(d / "trees.jsonl", single / "trees.jsonl")
    assert (d / "scores.jsonl").read_text() == (single / "scores.jsonl").read_text()
    assert json.loads((d / "pairs.json").read_text()) == json.loads((single / "pairs.json").read_text())
    assert json.loads((d / "pairs.done").read_text()) == json.loads((single / "pairs.done").read_text())

    # one set of outputs: one run dir layout, one merged checkpoint, one store run
    assert sorted(p.name for p in ddp_run.iterdir()) == ["config.json", "iter_1", "stages.json"]
    # rank 0 recorded what each stage ran under (training/csr/stages.py), once
    assert sorted(json.loads((ddp_run / "stages.json").read_text())["iter_1"]) == ["generate", "pairs", "score", "train"]
    assert sorted(p.name for p in d.glob("*.jsonl")) == ["scores.jsonl", "trees.jsonl",
                                                         "trees.rank0.jsonl", "trees.rank1.jsonl"]
    assert sorted(p.name for p in d.glob("*.done")) == ["generate.done", "generate.rank0.done", "generate.rank1.done",
                                                        "pairs.done", "score.done", "train.done"]
    assert sorted(p.name for p in d.iterdir() if p.is_dir()) == ["merged", "train"]
    assert json.loads((d / "train.done").read_text())["merged"] == str(d / "merged")
    # training ran data-parallel too: 7 pairs at 4 per device x 2 ranks = 1 optimizer step (a single
    # process takes ceil(7/4) = 2); step 0 with LoRA B = 0 has loss ln 2
    logs = [json.loads(x) for x in (d / "train" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logs if "loss" in r] == [1]
    assert logs[0]["loss"] == pytest.approx(0.6931, abs=1e-3)
    assert read_manifest(d / "merged")["iteration"] == 1
    assert proc.stdout.splitlines().count(str(d / "merged")) == 1  # only rank 0 prints the result
    runs = Store(ddp_store).snapshot().metrics()
    # rank 0 alone writes: one pair-statistics run (7 metric rows) and one training-log run
    pairs, train = runs[runs["task"] == "csr_pairs"], runs[runs["task"] == "csr_train"]
    assert len(pairs) == 7 and pairs["run_id"].nunique() == 1 and train["run_id"].nunique() == 1
    assert set(runs["task"]) == {"csr_pairs", "csr_train"}


def _worker(overrides: list[str]) -> int:
    """A torchrun worker: the loop's own entry point, with the result printed by rank 0 only."""
    import logging

    import torch

    from evalsuite.dist import Dist
    from training.csr.config import load_config
    from training.csr.loop import GROUP_TIMEOUT, run_csr

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format=f"rank{os.environ['RANK']} %(name)s %(message)s")
    # what training/train.py does: resolve once, join the group with the loop's timeout before the
    # config's TrainingArguments would start it (accelerate's 30-minute default), pass it in
    dist = Dist.current()
    assert dist.world_size == 2 and dist.init_group(None, timeout=GROUP_TIMEOUT)
    merged = run_csr(load_config(PRESET, overrides), dist)
    if dist.is_main:
        sys.stdout.write(f"{merged[-1]}\n")   # one write (torchrun's workers are unbuffered): a whole line
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
