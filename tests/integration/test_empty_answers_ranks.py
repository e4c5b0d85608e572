"""Nothing scores nothing under `torchrun --nproc_per_node 2` on CPU (gloo): the mute checkpoint's empty
answers fail the task on BOTH ranks with the same line and exit code, and the launch ends instead of rank 1
waiting at the next collective for ever (the collective logic itself: tests/unit/test_empty_answers_ranks.py)."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.integration.test_nothing_scores_nothing import _mute

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("task, args", [("caption", ["--max-new-tokens", "4"]),
                                        ("pope", ["--gen-kwargs", "max_new_tokens=4"])])
def test_two_ranks_fail_together_on_empty_answers(task, args, tiny_vlm_dir, world_dir, tmp_path):
    """An own task (caption: rank 0 answers the 1st and 3rd of the 4 images, rank 1 the others) and an lmms-eval one (pope:
    docs split by lmms-eval): each rank prints the one-line failure naming the 4 of 4 empty answers (the
    whole run's count, which rank 1 alone never holds); the launch exits 1; nothing is stored."""
    from tests.conftest import launch

    ckpt = _mute(tiny_vlm_dir, tmp_path / "mute")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "HF_HOME": str(tmp_path / "hf"),
           "LM_HARNESS_CACHE_PATH": str(tmp_path / "req")}
    env.pop("ACCELERATE_USE_CPU", None)
    def cmd(port):
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
                "-m", "evalsuite", "run", "--ckpt", str(ckpt), "--tasks", task, "--data-root", str(world_dir),
                "--limit", "4", "--batch-size", "2", "--device", "cpu", *args,
                "--store", str(tmp_path / "s"), "--output", str(tmp_path / "o")]
    # a rank left waiting would sit at its next collective for gloo's 30 minutes: the timeout catches it
    # (~25 s here; generous for a loaded 2-core machine, still far below gloo's 30 minutes)
    proc = launch(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    # found in the text, not by line start: the other rank's progress bar ("\r...") may share a line with it
    lines = re.findall(r"evalsuite: failed: [^\n\r]*", proc.stderr)
    assert len(lines) == 2 and lines[0] == lines[1], proc.stderr[-3000:]   # rank 0 and rank 1 alike
    # each rank's line is whole (one write each): never "msg msg" on one line
    assert all(ln.count("evalsuite: failed:") <= 1 for ln in proc.stderr.splitlines()), proc.stderr[-3000:]
    assert lines[0].startswith(f"evalsuite: failed: {task}: 4 of 4 answers are empty (more than 50%); nothing "
                               "stored for it and the run stops here"), lines[0]
    # (torchrun stops the other rank once one has exited non-zero, so its summary may show either 1 or SIGTERM
    # for the slower one; what matters is that both reached the same failure, the old rank 1 never did)
    assert not list((tmp_path / "s").rglob("*.parquet"))
