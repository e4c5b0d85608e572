"""`lora_scope`: where LoRA lands on the tiny kit LLaVA (docs/csr-fidelity.md, "LoRA targets").

released = VL-RLHF's `default_lora_target` / CSR's `find_all_linear_names` as peft applies them: the bare last
names of the language model's Linear layers, matched on every module of the model, so the vision tower's
q_proj/k_proj/v_proj take LoRA too and the projector (linear_1/2) and lm_head do not.
language_model = ours: the language model's Linear layers only.
"""
from __future__ import annotations

import json
import logging

import pytest
import torch

from evalsuite.errors import UserError

VISION = "vision_tower."
PROJECTOR = "multi_modal_projector."


@pytest.fixture(scope="module")
def kit_model(tiny_vlm_dir):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, dtype=torch.float32)


def _wrapped(model, targets):
    import copy

    from peft import LoraConfig, get_peft_model

    return get_peft_model(copy.deepcopy(model), LoraConfig(r=2, lora_alpha=4, target_modules=targets,
                                                            lora_dropout=0.0))


def _lora_tensors(peft, part: str) -> list[str]:
    return [n for n, _ in peft.named_parameters() if "lora_" in n and part in n]


def test_released_auto_adapts_the_vision_towers_qkv_and_ours_does_not(kit_model):
    from training.trainers.model import language_model_linears, lora_targets

    lm = set(language_model_linears(kit_model))
    released = lora_targets(kit_model, "auto", "released")
    ours = lora_targets(kit_model, "auto", "language_model")
    assert set(ours) == lm
    outside = [t for t in released if t not in lm]
    # the vision tower's attention projections, nothing else outside the LM (no out_proj, fc1/2, projector)
    assert outside and all(VISION in t for t in outside), outside
    assert {t.rsplit(".", 1)[1] for t in outside} == {"q_proj", "k_proj", "v_proj"}
    assert set(released) >= lm and not any(PROJECTOR in t or t.endswith("lm_head") for t in released)
    vision_layers = kit_model.config.vision_config.num_hidden_layers
    assert len(outside) == 3 * vision_layers

    peft_released, peft_ours = _wrapped(kit_model, released), _wrapped(kit_model, ours)
    # lora_A + lora_B for each of q/k/v in each vision layer (the audit's mock: 12 on a 2-layer tower)
    assert len(_lora_tensors(peft_released, VISION)) == 2 * 3 * vision_layers > 0
    assert _lora_tensors(peft_ours, VISION) == []
    assert _lora_tensors(peft_released, PROJECTOR) == _lora_tensors(peft_ours, PROJECTOR) == []
    assert len(_lora_tensors(peft_released, "language_model.")) == len(_lora_tensors(peft_ours, "language_model."))


def test_an_explicit_list_is_honoured_under_released_and_never_filtered_silently(kit_model, caplog):
    from training.trainers.model import language_model_linears, lora_targets

    lm = set(language_model_linears(kit_model))
    # released: a bare name lands wherever it matches, a vision-only name included
    q = lora_targets(kit_model, "q_proj", "released")
    assert any(VISION in t for t in q) and any(t in lm for t in q)
    fc1 = lora_targets(kit_model, "fc1", "released")
    assert fc1 and all(VISION in t for t in fc1)
    # language_model: restricted, and the left-out matches are named in a warning
    with caplog.at_level(logging.WARNING, logger="training.trainers.model"):
        q_lm = lora_targets(kit_model, "q_proj", "language_model")
    assert set(q_lm) == {t for t in q if t in lm}
    assert "outside the language model" in caplog.text and "left out by lora_scope language_model" in caplog.text
    # a name with matches only outside the LM is one line naming the field and the other setting
    with pytest.raises(UserError, match=r"^lora_target_modules: 'fc1' matches no Linear layer of the language "
                                        r"model \(\d+ outside it: lora_scope released adapts those\)$"):
        lora_targets(kit_model, "fc1", "language_model")
    for scope in ("released", "language_model"):
        with pytest.raises(UserError, match="^lora_target_modules: lm_head cannot take LoRA"):
            lora_targets(kit_model, "q_proj,lm_head", scope)
        with pytest.raises(UserError, match="^lora_target_modules: 'no_such_proj' matches no Linear layer"):
            lora_targets(kit_model, "no_such_proj", scope)


def test_presets_name_their_scope(repo_root):
    """The presets that name VL-RLHF / CSR run the released rule; the demo and tiny presets keep ours by name."""
    import yaml

    from training.config import TrainConfig

    assert TrainConfig.__dataclass_fields__["lora_scope"].default == "released"
    assert TrainConfig.__dataclass_fields__["lora_merge"].default == "all"
    cfgs = repo_root / "configs"
    vlrlhf = yaml.safe_load((cfgs / "train" / "llava15_7b_dpo.yaml").read_text())
    csr = yaml.safe_load((cfgs / "csr.yaml").read_text())["train"]
    assert (vlrlhf["lora_scope"], vlrlhf["lora_merge"]) == ("released", "all")
    assert (csr["lora_scope"], csr["lora_merge"]) == ("released", "language_model")
    assert yaml.safe_load((cfgs / "train" / "tiny_cpu.yaml").read_text())["lora_scope"] == "language_model"
    assert yaml.safe_load((cfgs / "csr_tiny.yaml").read_text())["train"]["lora_scope"] == "language_model"
    for demo in ("demo.yaml", "demo_tiny.yaml"):
        assert yaml.safe_load((cfgs / demo).read_text())["csr"]["train"]["lora_scope"] == "language_model", demo


def test_a_dpo_step_under_released_trains_the_vision_lora_and_not_the_vision_tower(tiny_vlm_dir, repo_root,
                                                                                  tmp_path):
    from PIL import Image

    from training.config import load_config
    from training.data import load_examples
    from training.trainers.dpo import build_dpo_trainer
    from training.trainers.model import load_model_and_processor

    for i, colour in enumerate(("red", "blue")):
        Image.new("RGB", (32, 32), colour).save(tmp_path / f"im{i}.png")
    pairs = [{"image": f"im{i % 2}.png", "prompt": "what colour is it?", "chosen": c, "rejected": r}
             for i, (c, r) in enumerate((("red.", "blue."), ("blue.", "red."), ("a red square.", "a cat."),
                                         ("a blue square.", "a dog.")))]
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    cfg = load_config(["--config", str(repo_root / "configs" / "train" / "tiny_cpu.yaml"),
                       "--lora_scope", "released", "--max_steps", "1", "--lora_dropout", "0.0",
                       "--model_name_or_path", str(tiny_vlm_dir), "--data_path", str(tmp_path / "pairs.json"),
                       "--image_root", str(tmp_path), "--output_dir", str(tmp_path / "out")])
    assert cfg.lora_scope == "released" and cfg.freeze_vision_tower
    train_ds, _, _ = load_examples(cfg)
    model, processor = load_model_and_processor(cfg)
    trainer = build_dpo_trainer(cfg, model, processor, train_ds)
    params = dict(trainer.model.named_parameters())
    vision_lora = {n: p.detach().clone() for n, p in params.items() if VISION in n and "lora_" in n}
    vision_base = {n: p.detach().clone() for n, p in params.items() if VISION in n and "lora_" not in n}
    assert vision_lora and all(params[n].requires_grad for n in vision_lora)
    assert vision_base and not any(params[n].requires_grad for n in vision_base)
    trainer.train()
    after = dict(trainer.model.named_parameters())
    # lora_B starts at zero, so the first step moves B only (A's gradient goes through B); layers past the
    # vision_feature_layer get no gradient at all
    moved = [n for n, p in vision_lora.items() if not torch.equal(p, after[n].detach())]
    assert any("lora_B" in n for n in moved), sorted(vision_lora)
    assert [n for n, p in vision_base.items() if not torch.equal(p, after[n].detach())] == []

    # the merge: VL-RLHF's merge_peft_model.py merges every adapter (lora_merge all); CSR's, through LLaVA's
    # loader, loses the CLIP adapters (lora_merge language_model): its merged vision tower is the base's
    from safetensors.torch import load_file

    from training.checkpoint import save_checkpoint

    def weights(d):
        return {k: v for f in sorted(d.glob("*.safetensors")) for k, v in load_file(str(f)).items()}

    base = weights(tiny_vlm_dir)
    merged = {}
    for how in ("all", "language_model"):
        out = save_checkpoint(trainer.model, processor, tmp_path / how, iteration=1, parent=None, method="dpo",
                              config={}, data_hash=None, base=tiny_vlm_dir, lora_merge=how)
        merged[how] = weights(out)
        assert json.loads((out / "evalsuite.json").read_text())["extra"]["merge"]["lora_dropped_layers"] == (
            0 if how == "all" else 3 * model.config.vision_config.num_hidden_layers)
    vision = [k for k in base if VISION in k]
    lm = [k for k in base if "language_model." in k and k.endswith("q_proj.weight")]
    assert vision and lm and set(merged["all"]) == set(merged["language_model"]) == set(base)
    assert [k for k in vision if not torch.equal(merged["language_model"][k], base[k])] == []
    assert [k for k in vision if not torch.equal(merged["all"][k], base[k])], "no vision LoRA was merged"
    for k in lm:  # the language model's LoRA is merged either way
        assert torch.equal(merged["all"][k], merged["language_model"][k]) and not torch.equal(merged["all"][k], base[k])
