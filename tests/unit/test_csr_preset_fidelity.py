"""configs/csr.yaml's image and projector settings reach the stages that use them (docs/csr-fidelity.md).

Images: the released sampler hands the raw image to the HF processor (sample.py: resize + centre crop),
its DPO pads to a square with the CLIP mean colour (run_train.sh --image_aspect_ratio pad, LLaVA's
expand2square with tuple(int(x * 255) for x in image_mean) = (122, 116, 104)). The preset's
`tree.image_aspect: crop` is what the loop's generator loads its inputs with, its `train.image_aspect:
pad` what the DPO collator gets. A 32x16 red image: cropped, pixel (0, 0) is red; padded to 32x32, rows
0-7 are the border colour, which the kit's 32 px processor keeps unscaled.

Projector: the released run trained LoRA only (its projector was frozen again by the second
get_peft_model); the preset's `train:` section on the tiny checkpoint gives trainable LoRA weights and
no projector weight, and `modules_to_save: multi_modal_projector` (our switch) makes the projector train.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from training.csr.config import load_config

CSR = Path(__file__).resolve().parents[2] / "configs" / "csr.yaml"
BORDER = (-0.011254, -0.011196, -0.001333)   # (122, 116, 104) / 255 normalised by CLIP's mean and std


def _preset(tiny_vlm_dir, tiny_clip_dir, tmp_path, *extra):
    return load_config(CSR, [f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"image_root={tmp_path}",
                             f"prompts={tmp_path / 'p.jsonl'}", f"output_dir={tmp_path / 'run'}", "dtype=float32",
                             "device=cpu", *extra])


RED = (1.930336, -1.752097, -1.480220)      # (255, 0, 0) normalised


def test_generation_crops_and_dpo_pads_as_released(tiny_vlm_dir, tiny_clip_dir, tmp_path):
    from PIL import Image

    from evalsuite.models.inputs import ModelInputs
    from training.csr.loop import _Models

    cfg = _preset(tiny_vlm_dir, tiny_clip_dir, tmp_path)
    assert (cfg.tree.image_aspect, cfg.train["image_aspect"]) == ("crop", "pad")
    red = Image.new("RGB", (32, 16), (255, 0, 0))
    vlm = _Models(cfg).vlm(str(tiny_vlm_dir))
    assert vlm.inputs.config.image_aspect == "crop"
    px = vlm.inputs.encode([vlm.inputs.prompt("what?")], [red])["pixel_values"][0]
    assert px[:, 0, 0].tolist() == pytest.approx(RED, abs=2e-3)
    train = cfg.train_config(tiny_vlm_dir, 1, tmp_path / "iter_1", portable=True)
    dpo = ModelInputs(vlm.processor, train.input_config())
    px = dpo.encode([dpo.prompt("what?")], [red])["pixel_values"][0]
    assert px[:, 0, 0].tolist() == pytest.approx(BORDER, abs=2e-3)
    # one setting for all (tree / train unset): the top-level value everywhere
    cfg = _preset(tiny_vlm_dir, tiny_clip_dir, tmp_path, "tree.image_aspect=null", "inputs.image_aspect=crop")
    cfg.train.pop("image_aspect")
    assert cfg.generation_input_config().image_aspect == "crop"
    assert cfg.train_config(tiny_vlm_dir, 1, tmp_path / "iter_1", portable=True).inputs.image_aspect == "crop"


@pytest.mark.parametrize("extra, projector_trains", [((), False), (("train.modules_to_save=multi_modal_projector",), True)])
def test_projector_is_frozen_as_released_unless_switched(tiny_vlm_dir, tiny_clip_dir, tmp_path, extra, projector_trains):
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText

    from training.trainers.model import lora_config

    cfg = _preset(tiny_vlm_dir, tiny_clip_dir, tmp_path, *extra)
    train = cfg.train_config(tiny_vlm_dir, 1, tmp_path / "iter_1", portable=True)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, local_files_only=True, use_safetensors=True)
    model = get_peft_model(model, lora_config(train, model))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("lora_" in n for n in trainable)
    assert any("multi_modal_projector" in n for n in trainable) is projector_trains
    # lora_scope released (CSR's suffix names): the vision tower trains its LoRA only (test_lora_scope.py)
    vision = [n for n in trainable if "vision_tower" in n]
    assert vision and all("lora_" in n for n in vision)


def test_generation_loads_the_model_in_fp16_as_released(tiny_vlm_dir, tiny_clip_dir, tmp_path):
    """sample.py loads LlavaForConditionalGeneration with torch_dtype=torch.float16: the preset's generator
    is loaded in float16 (the tiny checkpoint is saved in float32, so the dtype comes from the preset)."""
    import torch

    from training.csr.loop import _Models

    cfg = load_config(CSR, [f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"image_root={tmp_path}",
                            f"prompts={tmp_path / 'p.jsonl'}", f"output_dir={tmp_path / 'run'}", "device=cpu"])
    vlm = _Models(cfg).vlm(str(tiny_vlm_dir))
    assert next(vlm.model.parameters()).dtype == torch.float16


def test_released_second_get_peft_model_under_the_pinned_peft(repo_root, tiny_vlm_dir):
    """The released trainer wraps the model with LoRA (train_dpo_lora.py:878-886), re-enables the projector
    (initialize_vision_modules, :924-927) and wraps it again in its DPO trainer (dpo_trainer.py:214). Under
    peft <= 0.11 the second wrap marks only adapters trainable: the projector is frozen again, so the
    released run trained LoRA only. Under peft >= 0.12, and the version constraints.txt pins, the projector
    stays trainable: our frozen projector comes from the preset (no modules_to_save), not from peft."""
    import re

    import peft
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    pin = re.search(r"^peft==(\S+)$", (repo_root / "constraints.txt").read_text(), re.MULTILINE).group(1)
    assert peft.__version__ == pin
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, local_files_only=True, use_safetensors=True)
    names = sorted({n.split(".")[-1] for n, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear) and "projector" not in n and "lm_head" not in n})
    def lora():
        return LoraConfig(r=4, lora_alpha=8, target_modules=names, task_type="CAUSAL_LM")

    model = get_peft_model(model, lora())
    projector = [p for n, p in model.named_parameters() if "multi_modal_projector" in n]
    assert projector and not any(p.requires_grad for p in projector)
    for p in projector:
        p.requires_grad_(True)
    with pytest.warns(UserWarning):  # peft warns about modifying a PEFT model a second time
        model = get_peft_model(model, lora())
    projector = [p for n, p in model.named_parameters() if "multi_modal_projector" in n]
    assert all(p.requires_grad for p in projector)  # not re-frozen under the pinned peft


def test_generation_prompt_is_csr_get_prompts(tiny_vlm_dir, tiny_clip_dir, tmp_path):
    """CSR's get_prompts (inference_csr/utils.py): conv_vicuna_v1 (SeparatorStyle.TWO, sep " ") with the user
    message "<image>\\n" + q and an empty assistant turn renders system + " " + "USER: <image>\\nq" + " " +
    "ASSISTANT:". The preset's generator prompt is that string."""
    from evalsuite.models.vlm import build_prompt
    from training.csr.loop import _Models

    system = ("A chat between a curious user and an artificial intelligence assistant. "
              "The assistant gives helpful, detailed, and polite answers to the user's questions.")
    vlm = _Models(_preset(tiny_vlm_dir, tiny_clip_dir, tmp_path)).vlm(str(tiny_vlm_dir))
    assert build_prompt(vlm, "Describe the image.") == system + " " + "USER: <image>\nDescribe the image." + " " + "ASSISTANT:"
