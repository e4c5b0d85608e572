"""configs/csr.yaml itself (the released sampler's rules, beam LM score, fp32 merge) for one iteration on
the tiny kit: only paths, sizes and CPU settings are overridden, every fidelity switch keeps the preset's
value. Checks that the released rules hold in the trees the real loop writes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_released_preset_one_iteration(tmp_path, tiny_vlm_dir, tiny_clip_dir, world_dir):
    from evalsuite.manifest import read_manifest
    from evalsuite.models.vlm import load_vlm
    from training.csr.config import load_config
    from training.csr.generate import read_trees
    from training.csr.loop import run_csr

    images = world_dir / "images" / "train"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.stem, "image": p.name, "question": "Describe the image."}) + "\n"
                               for p in sorted(images.iterdir())[:4]))
    overrides = [f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
                 f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}", "iterations=1", "device=cpu",
                 "dtype=float32", "tree.max_new_tokens=8", "tree.max_chars=150",
                 "train.bf16=false", "train.use_cpu=true", "train.gradient_checkpointing=false", "train.lora_r=8",
                 "train.lora_alpha=16",
                 # Vicuna's system prompt in words the tiny word-level tokenizer knows: it decodes the real one some
                 # 80 characters short (unknown words vanish), and the released scorer's cut at len(prompt string) + 3 would then
                 # leave every depth-1 sentence empty, dropped as too short (tree.junk_rules: released)
                 "inputs.system_prompt=a user and an assistant. the assistant is detailed."]
    cfg = load_config(REPO / "configs" / "csr.yaml", overrides)
    assert (cfg.tree.stop, cfg.tree.dedupe_siblings, cfg.tree.junk_filter, cfg.reward.language_score) == \
        ("released", False, "after_pruning", "beam")
    (merged,) = run_csr(cfg)

    vlm = load_vlm(merged, device="cpu")
    tok, period = vlm.tokenizer, vlm.tokenizer.convert_tokens_to_ids(".")
    trees = read_trees(tmp_path / "run" / "iter_1" / "trees.jsonl")
    for tree in trees:
        for node in tree.nodes[1:]:
            ids = node.sentence_ids
            # a sentence ends only at "." or at the 8-token cap, never at EOS or another mark
            assert ids[-1] == period or len(ids) == 8
            assert period not in ids[:-1]
            siblings = tree.nodes[node.parent].children
            assert len(siblings) == cfg.tree.num_beams  # duplicates kept: always 5 children
    scores = [json.loads(x) for x in (tmp_path / "run" / "iter_1" / "scores.jsonl").read_text().splitlines()]
    for tree, sc in zip(trees, scores):
        for nid, s in sc["nodes"].items():
            assert s["lm"] == tree.nodes[int(nid)].sentence_score  # the beam's own score
    # construct.py's pair file: the templated generation prompt as the human turn (Vicuna v1, system
    # prompt included), trained through the csr_pairs reader; candidates generated from the cropped image
    from evalsuite.models.inputs import InputConfig

    pairs = json.loads((tmp_path / "run" / "iter_1" / "pairs.json").read_text())
    base = load_vlm(cfg.model, device="cpu", inputs=InputConfig(system_prompt=cfg.inputs.system_prompt))
    for rec in pairs:
        assert rec["template"] == "released"
        assert rec["conversations"][0]["value"] == base.inputs.prompt("Describe the image.").strip()
    loop_man = json.loads((tmp_path / "run" / "iter_1" / "manifest.json").read_text())
    assert (loop_man["generation_inputs"]["image_aspect"], loop_man["train_config"]["inputs"]["image_aspect"]) == ("crop", "pad")
    man = read_manifest(merged)
    assert man["extra"]["merge"]["dtype"] == "float32" and man["extra"]["merge"]["delta_kept"] == pytest.approx(1.0, abs=1e-3)
    # lora_scope released trained LoRA on the vision tower's q/k/v too; lora_merge language_model left it out
    assert (loop_man["train_config"]["lora_scope"], loop_man["train_config"]["lora_merge"]) == ("released", "language_model")
    assert man["extra"]["merge"]["lora_dropped_layers"] > 0
    assert tok.decode([period]) == "."
