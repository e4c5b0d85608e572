"""The tiny-model kit writes real HF checkpoints; the VLM loader loads them and rejects bad dirs."""
import shutil
from pathlib import Path

import pytest

from evalsuite.errors import UserError


def test_tiny_vlm_roundtrips_and_generates(tiny_vlm_dir, world_dir):
    import torch
    from transformers import (
        AutoModelForImageTextToText,
        AutoProcessor,
        LlavaForConditionalGeneration,
    )

    from evalsuite.gen_settings import GenConfig
    from evalsuite.models.vlm import build_prompt, generate, load_vlm
    from evalsuite.types import GenRequest

    assert (tiny_vlm_dir / "model.safetensors").exists() and (tiny_vlm_dir / "evalsuite.json").exists()
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, local_files_only=True)
    assert isinstance(model, LlavaForConditionalGeneration)
    proc = AutoProcessor.from_pretrained(tiny_vlm_dir, local_files_only=True)
    assert type(proc).__name__ == "LlavaProcessor"
    assert type(proc.image_processor).__name__.startswith("CLIPImageProcessor")

    vlm = load_vlm(tiny_vlm_dir, device="cpu")
    assert build_prompt(vlm, "Please describe this image in detail.") == (
        "USER: <image>\nPlease describe this image in detail. ASSISTANT:")
    images = sorted((world_dir / "images" / "val").glob("*.png"))[:3]
    reqs = [GenRequest(key=str(i), image=p, prompt="Please describe this image in detail.") for i, p in enumerate(images)]
    gen = GenConfig(max_new_tokens=6)
    batched = generate(vlm, reqs, gen, batch_size=3)
    single = [generate(vlm, [r], gen, batch_size=1)[0] for r in reqs]
    assert len(batched) == 3 and all(isinstance(a, str) for a in batched)
    assert batched == single  # left padding does not change greedy answers
    assert "<image>" not in " ".join(batched)

    # same seed -> bit-identical weights
    from safetensors.torch import load_file

    a = load_file(tiny_vlm_dir / "model.safetensors")
    from evalsuite.kit.tiny import build_tiny_vlm

    other = build_tiny_vlm(tiny_vlm_dir.parent / "again", seed=0)
    b = load_file(other / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_tiny_clip_roundtrips(tiny_clip_dir):
    from PIL import Image
    from transformers import AutoProcessor, CLIPModel

    model = CLIPModel.from_pretrained(tiny_clip_dir, local_files_only=True)
    proc = AutoProcessor.from_pretrained(tiny_clip_dir, local_files_only=True)
    ids = proc.tokenizer("a dog beside a car").input_ids
    assert ids[-1] == proc.tokenizer.eos_token_id != 2  # CLIP pools at EOS; 2 would select legacy pooling
    out = model(**proc(text=["a dog"], images=[Image.new("RGB", (64, 64))], return_tensors="pt", padding=True))
    assert out.logits_per_image.shape == (1, 1)


def test_tiny_vlm_vision_tower_from_clip(tmp_path):
    """LLaVA-style start: the VLM's vision tower is a CLIP's vision tower, config and weights, and the
    feature layer is configurable (the demo uses -2, LLaVA's penultimate layer)."""
    import torch
    from safetensors.torch import load_file
    from transformers import CLIPModel, LlavaForConditionalGeneration

    from evalsuite.kit.tiny import build_tiny_clip, build_tiny_vlm

    clip_dir = build_tiny_clip(tmp_path / "clip", seed=5, patch_size=16)
    vlm_dir = build_tiny_vlm(tmp_path / "vlm", seed=0, vision_from=clip_dir, vision_feature_layer=-2)
    vlm = LlavaForConditionalGeneration.from_pretrained(vlm_dir, local_files_only=True)
    clip = CLIPModel.from_pretrained(clip_dir, local_files_only=True)
    want = clip.vision_model.state_dict()
    got = vlm.model.vision_tower.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert vlm.config.vision_feature_layer == -2 and vlm.config.vision_config.patch_size == 16
    plain = load_file(build_tiny_vlm(tmp_path / "plain", seed=0) / "model.safetensors")
    key = next(k for k in plain if k.endswith("vision_tower.vision_model.embeddings.patch_embedding.weight"))
    assert not torch.equal(plain[key], load_file(vlm_dir / "model.safetensors")[key])


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_load_errors(tiny_vlm_dir, tiny_clip_dir, tmp_path):
    from evalsuite.models.vlm import load_vlm

    with pytest.raises(UserError, match="does not exist"):
        load_vlm(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        load_vlm(tmp_path / "empty")
    noweights = _copy(tiny_vlm_dir, tmp_path / "noweights")
    (noweights / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no \\*.safetensors"):
        load_vlm(noweights)
    trunc = _copy(tiny_vlm_dir, tmp_path / "trunc")
    data = (trunc / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="truncated"):
        load_vlm(trunc)
    with pytest.raises(UserError, match="not a vision-language model"):
        load_vlm(_text_only(tmp_path))
    with pytest.raises(UserError, match="not a loadable vision-language checkpoint"):
        load_vlm(tiny_clip_dir)  # has a vision tower, but is no image-to-text model


def _text_only(tmp_path: Path) -> Path:
    """A real (tiny) text-only Llama checkpoint: loads fine, but is not a VLM."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path / "llama"
    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(out)
    return out
