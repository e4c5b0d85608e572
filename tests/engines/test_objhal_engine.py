"""`evalsuite run --tasks objhal --engine vllm`: the prompt file's inline (base64) images reach the vLLM worker
as bytes, and the answers and values equal the HF engine's (objhal.extractor=chair: no judge needed)."""
from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli

DATA = Path(__file__).resolve().parents[1] / "data" / "objhal"


def test_objhal_vllm_engine_equals_hf(vllm_spec, vllm_ckpts, world_dir, objhal_prompts, tmp_path):
    ckpt = vllm_ckpts["llava"]

    def run(engine: str):
        res = run_cli("run", "--ckpt", str(ckpt), "--tasks", "objhal", "--data-root", str(world_dir),
                      f"objhal.data={objhal_prompts}", f"objhal.synonyms={DATA / 'synonyms_refine.txt'}",
                      "objhal.extractor=chair", f"objhal.cache_dir={tmp_path / 'gt'}", "--engine", engine,
                      "--batch-size", "2", "--max-new-tokens", "16", "--store", str(tmp_path / engine),
                      "--output", str(tmp_path / f"out_{engine}"), env={"EVALSUITE_VLLM_PYTHON": vllm_spec.python}, timeout=900)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        out = tmp_path / f"out_{engine}" / "objhal"
        samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        metrics = {m["metric"]: m["value"] for m in json.loads((out / "result.json").read_text())["metrics"]}
        return [s["answer"] for s in samples], metrics

    hf, vllm = run("hf"), run("vllm")
    assert len(hf[0]) == 4 and vllm == hf
