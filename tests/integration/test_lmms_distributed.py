"""Data-parallel lmms-eval tasks: `torchrun --nproc_per_node 2` on CPU (gloo).

Each rank answers every 2nd doc (rank 0: 0, 2, 4, ...; rank 1: 1, 3, 5, ...), lmms-eval gathers the
answers on rank 0, and only rank 0 gets results. The scores must equal a single-process run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

WORKER = textwrap.dedent('''
    import json, os, sys
    from pathlib import Path
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    from evalsuite.tasks.lmms import run_lmms_tasks

    class Yes:
        device, fingerprint, name = "cpu", "yes-model", "yes"
        def __init__(self): self.generated = []
        def generate(self, reqs, gen):
            self.generated.extend(r.key for r in reqs)
            return ["Yes"] * len(reqs)
        def loglikelihood(self, pairs): return [(-1.0, True)] * len(pairs)

    world, out = Path(sys.argv[1]), Path(sys.argv[2])
    backend = Yes()
    results = run_lmms_tasks(["mme", "pope"], backend=backend, data_root=world, batch_size=2,
                             cache_root=out / ".resume" / "lmms")
    (out / f"docs_rank{rank}.json").write_text(json.dumps(backend.generated))
    if rank == 0:
        (out / "results.json").write_text(json.dumps(
            {r.task: {"metrics": {m.metric: m.value for m in r.metrics}, "n": len(r.samples),
                      "doc_ids": [s["doc_id"] for s in r.samples]} for r in results}))
    else:
        assert results == [], results
    dist.barrier()
    dist.destroy_process_group()
''')


def _torchrun(worker, world, out, env):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
           str(worker), str(world), str(out)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)


@pytest.mark.slow
def test_torchrun_two_ranks_split_docs_and_rank0_writes(world_dir, tmp_path):
    """World MME (120 docs here) and POPE: rank r generates docs r, r+2, ...; rank 0's results hold all
    docs with the single-process Yes-model numbers (POPE accuracy 0.5, F1 2/3); a second launch
    regenerates nothing on either rank (each rank's cache file, read by both)."""
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf"),
           "LM_HARNESS_CACHE_PATH": str(tmp_path / "req")}
    proc = _torchrun(worker, world_dir, out, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = [json.loads((out / f"docs_rank{r}.json").read_text()) for r in (0, 1)]
    for rank, keys in enumerate(docs):
        mme_ids = [int(k.rsplit("/", 1)[1]) for k in keys if k.startswith("evalsuite_mme/")]
        assert mme_ids and all(i % 2 == rank for i in mme_ids), (rank, mme_ids[:10])
    results = json.loads((out / "results.json").read_text())
    n_mme = results["mme"]["n"]
    assert results["mme"]["doc_ids"] == list(range(n_mme))
    assert sum(len([k for k in d if k.startswith("evalsuite_mme/")]) for d in docs) >= n_mme
    assert all(v % 50 == 0 and v > 0 for v in results["mme"]["metrics"].values())
    assert results["pope"]["metrics"]["pope_accuracy"] == 0.5
    assert results["pope"]["metrics"]["pope_f1_score"] == pytest.approx(2 / 3)

    again = _torchrun(worker, world_dir, out, env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [json.loads((out / f"docs_rank{r}.json").read_text()) for r in (0, 1)] == [[], []]
    assert json.loads((out / "results.json").read_text()) == results
