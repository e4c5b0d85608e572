"""bench/gpu.sh --tiny on CPU: the prepared GPU script runs end to end on tiny shapes (same code as the
7B run), prints every figure for both architectures, writes its JSON and skips the multi-GPU part."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_sh_tiny_on_cpu(tmp_path):
    env = {**os.environ, "PY": sys.executable, "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path),
           "PYTHONPATH": str(REPO)}
    out = tmp_path / "figures.json"
    proc = subprocess.run(["bash", "bench/gpu.sh", "--tiny", "--out", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "gpu_figures: device cpu, bf16 dense peak n/a TFLOP/s, tiny shapes" in text
    assert "== part 2: skipped (the multi-GPU checks need 2 GPUs, found 0)" in text
    rows = json.loads(out.read_text())["rows"]
    for arch in ("llava", "qwen2_vl"):
        mine = {r["figure"].split(" (")[0]: r for r in rows if r["arch"] == arch}
        assert set(mine) == {"model build", "eval evalsuite generate", "eval plain HF generate",
                             "eval evalsuite / plain HF", "csr tree nodes", "csr tree candidate tokens",
                             "csr tree forwards per 1,000 sentences", "csr tree est. hours per 12,856-prompt iteration",
                             "csr pool tree nodes", "csr pool tree candidate tokens",
                             "csr pool tree forwards per 1,000 sentences",
                             "csr pool tree est. hours per 12,856-prompt iteration",
                             "csr tree peak memory allocated", "csr pool tree peak memory allocated",
                             "csr vllm tree skipped: no CUDA device",
                             "dpo step", "dpo peak memory allocated"}
        for name in ("eval evalsuite generate", "eval plain HF generate", "csr tree nodes", "dpo step"):
            r = mine[name]
            assert r["value"] > 0 and r["flops"] > 0 and r["mfu"] is None  # no peak known for the CPU
            assert f"{arch:<10}{r['figure']}" in text  # the printed table has the row
        # --tiny: batch 2 x 8 new tokens on each side; 2 prompts -> 2*5 + 2*3*5 = 40 candidate sentences
        assert mine["eval evalsuite generate"]["tokens"] == mine["eval plain HF generate"]["tokens"] == 16
        assert mine["eval evalsuite generate"]["flops"] == mine["eval plain HF generate"]["flops"]
        assert mine["csr tree nodes"]["nodes"] == 40
        assert mine["csr pool tree nodes"]["nodes"] == 80  # 4 prompts, the same trees' sizes
        assert mine["csr pool tree forwards per 1,000 sentences"]["value"] < mine["csr tree forwards per 1,000 sentences"]["value"]
        assert mine["dpo peak memory allocated"]["value"] is None  # CPU: not measured, printed n/a
        assert mine["csr pool tree peak memory allocated"]["value"] is None
    # LLaVA by hand (tests/unit/test_gpu_figures.py: N_body 74,048, N_head 32,768, N_vis 125,056, 14 prompt
    # positions, 5 patches per image). Eval, 2 rows x 8 tokens: 2*74,048*(2*14 + 2*7) + 2*32,768*16
    # + 2*125,056*10 = 9,769,728. DPO step, 2 pairs = 4 rows of 14 prompt + 9 answer positions (8 words
    # + </s>): reference 2 + policy 6 on the body, 8 on the 36 scored positions, vision 2 + 2:
    # 8*74,048*92 + 8*32,768*36 + 4*125,056*20 = 73,940,992 per step, 2 timed steps.
    llava = {r["figure"].split(" (")[0]: r for r in rows if r["arch"] == "llava"}
    assert llava["eval evalsuite generate"]["flops"] == 9_769_728
    assert llava["dpo step"]["flops"] == 2 * 73_940_992
