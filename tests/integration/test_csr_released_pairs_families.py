"""The released pair and reward switches (pairs.template released, post_eos keep, no guards;
reward.clip_text released: configs/csr.yaml's) on families other than LLaVA: one CSR iteration reaches
DPO with the templated human turn (test_families.py runs csr_tiny's own switches)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("arch", ["qwen2_vl", "blip2", "mllama"])
def test_one_csr_iteration_with_the_released_switches(arch, tiny_clip_dir, world_dir, tmp_path):
    from evalsuite.kit.families import build_tiny_family
    from training.csr.config import load_config
    from training.csr.loop import run_csr

    ckpt = build_tiny_family(arch, tmp_path / "ckpt", seed=0)
    images = world_dir / "images" / "train"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.stem, "image": p.name, "question": "Describe the image."}) + "\n"
                               for p in sorted(images.iterdir())[:4]))
    overrides = [f"model={ckpt}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
                 f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}", "iterations=1",
                 "tree.max_depth=2", "tree.max_new_tokens=6", "train.max_steps=2",
                 "reward.clip_text=released", "pairs.template=released", "pairs.post_eos=keep", "pairs.guards=false"]
    (merged,) = run_csr(load_config(REPO / "configs" / "csr_tiny.yaml", overrides))
    rows = json.loads((tmp_path / "run" / "iter_1" / "pairs.json").read_text())
    assert rows and all(r["template"] == "released" for r in rows)
    assert Path(merged).is_dir()
