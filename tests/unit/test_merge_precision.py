"""The LoRA merge keeps a delta below bf16's resolution (docs/csr-fidelity.md, "Merge precision").

The tiny checkpoint is re-saved in fp16 (llava-1.5-hf's dtype) and loaded in bf16 as training loads it.
Its language-model weights have std 0.02, where one bf16 step is 2^-13 = 1.2e-4 and one fp16 step 2^-16
= 1.5e-5: a LoRA delta of rms ~2e-5 mostly rounds away in bf16 and survives in fp16. save_checkpoint
merges in float32 into the fp16 base weights re-read from disk and saves fp16; the reload must show
>= 90 % of the delta, where merging into the bf16 training copy (the old way) keeps far less.
"""
from __future__ import annotations

import json
import logging

import pytest
import torch


@pytest.fixture(scope="module")
def fp16_base(tiny_vlm_dir, tmp_path_factory):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = tmp_path_factory.mktemp("fp16_base")
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, dtype=torch.float32)
    model.to(torch.float16).save_pretrained(out)
    AutoProcessor.from_pretrained(tiny_vlm_dir).save_pretrained(out)
    return out


def _lora(base, std_b: float, seed: int = 0):
    """The base loaded in bf16 with a LoRA (r 4, alpha 8 -> scale 2) whose delta rms is 4 * 0.01 * std_b."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from training.trainers.model import language_model_linears

    model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch.bfloat16)
    targets = language_model_linears(model)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_A" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
            elif "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * std_b)
    return peft, targets


def _deltas(peft) -> dict[str, torch.Tensor]:
    from peft.tuners.lora import LoraLayer

    prefix = "base_model.model."
    return {name[len(prefix):] + ".weight": (m.lora_B["default"].weight.float() @ m.lora_A["default"].weight.float())
            * m.scaling["default"] for name, m in peft.named_modules() if isinstance(m, LoraLayer)}


def _kept(weights: dict[str, torch.Tensor], base: dict[str, torch.Tensor], deltas: dict[str, torch.Tensor]) -> float:
    """<merged - base, delta> / <delta, delta> over every LoRA weight (1.0 = the whole delta survived)."""
    num = sum(float(((weights[k].float() - base[k].float()) * d).sum()) for k, d in deltas.items())
    den = sum(float((d * d).sum()) for d in deltas.values())
    return num / den


def test_sub_bf16_delta_survives_merge_save_reload(fp16_base, tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from training.checkpoint import save_checkpoint

    peft, _ = _lora(fp16_base, std_b=5e-4)
    deltas = _deltas(peft)
    rms = (sum(float((d * d).sum()) for d in deltas.values()) / sum(d.numel() for d in deltas.values())) ** 0.5
    assert 1e-5 < rms < 4e-5
    base = AutoModelForImageTextToText.from_pretrained(fp16_base, dtype=torch.float32).state_dict()
    out = save_checkpoint(peft, AutoProcessor.from_pretrained(fp16_base), tmp_path / "merged", iteration=1,
                          parent=str(fp16_base), method="csr", config={}, data_hash=None, base=fp16_base)
    merged = AutoModelForImageTextToText.from_pretrained(out)
    assert merged.dtype == torch.float16 and json.loads((out / "config.json").read_text())["dtype"] == "float16"
    assert _kept(merged.state_dict(), base, deltas) > 0.9
    stats = json.loads((out / "evalsuite.json").read_text())["extra"]["merge"]
    assert stats["dtype"] == "float16" and stats["delta_kept"] > 0.9
    assert stats["rms_lora_delta"] == pytest.approx(rms, rel=1e-3)
    assert stats["rms_merged_minus_base"] == pytest.approx(rms, rel=0.3)
    # the old way: peft's merge into the bf16 training copy
    old = peft.merge_and_unload().state_dict()
    assert _kept(old, base, deltas) < 0.6


def test_lost_delta_is_recorded_and_warned(fp16_base, tmp_path, caplog):
    """rms ~4e-8 is below even fp16's resolution: the manifest says how little survived, a warning says so,
    and merge_dtype float32 keeps all of it."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from training.checkpoint import save_checkpoint

    peft, _ = _lora(fp16_base, std_b=1e-6)
    kwargs = dict(iteration=1, parent=None, method="csr", config={}, data_hash=None, base=fp16_base)
    proc = AutoProcessor.from_pretrained(fp16_base)
    with caplog.at_level(logging.WARNING, logger="training.checkpoint"):
        out = save_checkpoint(peft, proc, tmp_path / "m16", **kwargs)
    stats = json.loads((out / "evalsuite.json").read_text())["extra"]["merge"]
    assert stats["delta_kept"] < 0.5 and "survived" in caplog.text
    out32 = save_checkpoint(peft, proc, tmp_path / "m32", merge_dtype="float32", **kwargs)
    assert json.loads((out32 / "evalsuite.json").read_text())["extra"]["merge"]["delta_kept"] == pytest.approx(1.0, abs=1e-3)
    assert AutoModelForImageTextToText.from_pretrained(out32).dtype == torch.float32
