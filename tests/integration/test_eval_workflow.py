"""run_eval's workflow on the tiny VLM: tasks that require another's answers, reuse of stored results and
cached answers, the CSR loop's coupled evaluation resumed, and own tasks sharded over 2 ranks."""
from __future__ import annotations

import json
import logging
import os
import sys
import textwrap

import pytest

from tests.conftest import REPO, launch


def _eval(*argv):
    from evalsuite.run import run_eval
    from evalsuite.run_config import load_eval_config

    return run_eval(load_eval_config(list(argv))[0])


def test_relevance_alone_runs_caption_as_a_dependency_then_reuses_its_answers(
        tiny_vlm_dir, tiny_clip_dir, world_dir, tmp_path, caplog):
    """--tasks relevance: caption's answers are generated (3) and scored, only relevance is stored. Then
    --tasks caption,relevance into a new output dir: relevance is already in the store (not run again),
    caption's 3 answers all come from the resume cache, so the checkpoint is never loaded."""
    common = ["--ckpt", str(tiny_vlm_dir), "--data-root", str(world_dir), "--limit", "3", "--max-new-tokens", "6",
              "--clip", str(tiny_clip_dir), "--device", "cpu", "--store", str(tmp_path / "store")]
    first = _eval("--tasks", "relevance", "--output", str(tmp_path / "a"), *common)
    assert list(first["tasks"]) == ["relevance"] and not (tmp_path / "a" / "caption").exists()
    answers = [json.loads(x)["answer"] for x in (tmp_path / "a" / "relevance" / "samples.jsonl").read_text().splitlines()]
    assert len(answers) == 3
    caplog.clear()
    with caplog.at_level(logging.INFO):
        second = _eval("--tasks", "caption,relevance", "--output", str(tmp_path / "b"), *common)
    assert second["tasks"]["relevance"]["reused"] == f"{first['run_id']}-relevance"
    assert [json.loads(x)["answer"] for x in (tmp_path / "b" / "caption" / "samples.jsonl").read_text().splitlines()] \
        == answers
    assert "answers: 3 of 3 taken from the resume cache, 0 to generate" in caplog.text
    assert "loaded" not in caplog.text          # no model load
    from evalsuite.store import Store

    assert sorted(Store(tmp_path / "store").snapshot().runs()["tasks"]) == ["caption", "relevance"]
    third = _eval("--tasks", "relevance", "--rerun", "--output", str(tmp_path / "c"), *common)
    assert third["tasks"]["relevance"]["metrics"]       # --rerun: scored and stored again
    assert sorted(Store(tmp_path / "store").snapshot().runs()["tasks"]) == ["caption", "relevance", "relevance"]


def test_csr_coupled_eval_started_again_stores_nothing_twice(tiny_vlm_dir, world_dir, tmp_path):
    """The CSR loop's stage_eval run twice on one checkpoint (a rerun after a kill): the second resumes
    the same output dir and run, finds caption in the store, and writes nothing new."""
    from training.csr.config import load_config
    from training.csr.loop import stage_eval

    cfg = load_config(REPO / "configs" / "csr_tiny.yaml", [
        f"model={tiny_vlm_dir}", f"store={tmp_path / 'store'}", "eval.tasks=[caption]",
        f"eval.data_root={world_dir}", "eval.limit=2", "eval.gen.max_new_tokens=4"])
    out = tmp_path / "base_eval"
    stage_eval(cfg, str(tiny_vlm_dir), "csr_tiny/base", out)
    metrics = sorted((tmp_path / "store" / "metrics").iterdir())
    run_json = (out / "run.json").read_text()
    stage_eval(cfg, str(tiny_vlm_dir), "csr_tiny/base", out)
    assert sorted((tmp_path / "store" / "metrics").iterdir()) == metrics and len(metrics) == 1
    assert (out / "run.json").read_text() == run_json


WORKER = textwrap.dedent('''
    import json, sys
    from evalsuite.run import run_eval
    from evalsuite.run_config import load_eval_config
    from evalsuite.dist import Dist

    summary = run_eval(load_eval_config(sys.argv[1:])[0])
    d = Dist.current()
    print(json.dumps({"rank": d.rank, "world": d.world_size, "tasks": sorted(summary["tasks"])}))
''')


@pytest.mark.slow
def test_two_ranks_shard_own_tasks_and_rank0_writes(tiny_vlm_dir, world_dir, tmp_path):
    """torchrun --nproc_per_node 2 (gloo): each rank answers every 2nd image into its own cache file,
    rank 0 gathers, scores and writes; the answers equal a single-process run's, in the same order."""
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    args = ["--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world_dir), "--limit", "5",
            "--max-new-tokens", "6", "--batch-size", "2", "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    dist_args = [*args, "--store", str(tmp_path / "s2"), "--output", str(tmp_path / "o2")]
    proc = launch(lambda port: [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                                str(port), str(worker), *dist_args], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the single-process reference in this process (the worker's own code, run_eval, without a launch's imports)
    one = _eval(*args, "--store", str(tmp_path / "s1"), "--output", str(tmp_path / "o1"))
    assert list(one["tasks"]) == ["caption"]
    caches = sorted((tmp_path / "s2" / ".resume" / "own").glob("*/answers.rank*.jsonl"))
    assert [len(c.read_text().splitlines()) for c in caches] == [3, 2]   # images 0,2,4 and 1,3
    rows = lambda o: [json.loads(x) for x in (tmp_path / o / "caption" / "samples.jsonl").read_text().splitlines()]
    assert rows("o2") == rows("o1") and len(rows("o2")) == 5
    assert len(list((tmp_path / "s2" / "metrics").iterdir())) == 1
