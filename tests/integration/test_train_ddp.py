"""A 2-process DDP DPO step on CPU (torchrun, gloo): both ranks log the same loss, one checkpoint is written."""
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import launch
from tests.integration.test_train import base_args, data  # noqa: F401  (the module fixture)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ddp_two_ranks(tiny_vlm_dir, world_dir, data, tmp_path):  # noqa: F811
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found")
    out = tmp_path / "ddp"
    r = launch(lambda port: [torchrun, "--nproc_per_node", "2", "--master_port", str(port), str(REPO / "training" / "train.py"),
               *base_args(tiny_vlm_dir, world_dir, data, out, "--ddp_backend", "gloo", "--per_device_train_batch_size", "2")],
               capture_output=True, text=True, timeout=900, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    rank0 = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rank1 = [json.loads(x) for x in (out / "metrics.rank1.jsonl").read_text().splitlines()]
    l0 = [x["loss"] for x in rank0 if "loss" in x]
    l1 = [x["loss"] for x in rank1 if "loss" in x]
    assert len(l0) == 2 and l0 == l1
    assert rank0[0]["loss"] == pytest.approx(0.6931472, rel=1e-5)
    merged = [p for p in out.iterdir() if p.is_dir() and "merged" in p.name]
    assert merged == [out / "merged"]  # one checkpoint, no leftover temp dirs
    assert json.loads((out / "merged" / "evalsuite.json").read_text())["parent"] == str(tiny_vlm_dir)
