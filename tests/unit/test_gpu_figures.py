"""bench/gpu_models.py: the 7B shapes are the released checkpoints', the peak table, the FLOP counter
(hand-worked on the tiny LLaVA), and bench/gpu_figures.py's refusal of 7B shapes without a GPU."""
from __future__ import annotations

import pytest

from bench.gpu_models import FlopCounter, build_vlm, peak_flops


@pytest.mark.parametrize("arch, params", [
    # llava-hf/llava-1.5-7b-hf and Qwen/Qwen2-VL-7B-Instruct: safetensors index total_size / 2 bytes (bf16)
    ("llava", 7_063_427_072),
    ("qwen2_vl", 8_291_375_616),
])
def test_full_shapes_have_the_released_parameter_counts(arch, params):
    """Built on the meta device (no memory): every parameter of the released model, no more, no fewer."""
    import torch

    from bench.gpu_models import BUILDERS, SHAPES

    config, processor, cls = BUILDERS[arch](SHAPES[arch]["full"])
    with torch.device("meta"):
        model = cls._from_config(config, dtype=torch.bfloat16)
    assert sum(p.numel() for p in model.parameters()) == params
    assert len(processor.tokenizer) == config.get_text_config().vocab_size  # every id the head emits decodes


def test_peak_table():
    assert peak_flops("NVIDIA H200") == 989e12
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops("cpu") is None and peak_flops("NVIDIA H20") is None


def test_flop_counter_on_a_tiny_generate():
    """Tiny LLaVA (hidden 64, 2 layers, 2 KV heads of 16, MLP 128, vocab 512; CLIP 64-wide, 2 layers,
    32 px / 16 px patches; 2-layer projector), by hand:
      body   per layer q 64*64 + k 64*32 + v 64*32 + o 64*64 = 12,288, MLP 3*64*128 = 24,576, 2 norms 128
             -> 2 * 36,992 + final norm 64 = 74,048 (embedding table excluded)
      head   512 * 64 = 32,768
      vision patch conv 3*16*16*64 = 49,152, class 64, positions 5*64 = 320, 4 layer norms 4*128 = 512,
             2 layers * (attention 4*(64*64+64) = 16,640 + MLP 64*128+128+128*64+64 = 16,576 + 2 norms 256)
             = 66,944, projector 2*(64*64+64) = 8,320 -> 125,056
    One image + "Describe the image in detail." is 14 prompt positions (4 image tokens); 3 new tokens =
    1 prefill + 2 steps: 2*74,048*(14+2) + 2*32,768*3 + 2*125,056*(4+1) = 3,816,704 FLOPs."""
    import torch
    from PIL import Image

    from evalsuite.models.vlm import encode_batch
    from evalsuite.types import GenRequest

    vlm = build_vlm("llava", tiny=True, device="cpu", dtype=torch.float32)
    counter = FlopCounter(vlm.model)
    assert (counter.n_body, counter.n_head, counter.n_vision) == (74_048, 32_768, 125_056)
    enc = encode_batch(vlm, [GenRequest("0", Image.new("RGB", (32, 32)), "Describe the image in detail.")])
    assert enc["input_ids"].shape == (1, 14)
    with torch.inference_mode():
        vlm.model.generate(**enc, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    assert (counter.flops, counter.lm_forwards, counter.positions) == (3_816_704, 3, 16)
    counter.close()
    vlm.model(**enc)  # detached: nothing more is counted
    assert counter.flops == 3_816_704


def test_refuses_7b_shapes_without_a_gpu(monkeypatch, capsys):
    import torch

    from bench.gpu_figures import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        main(["--arch", "llava"])
    assert exc.value.code == 2
    assert "gpu_figures.py: error: the 7B-shaped figures need a CUDA GPU" in capsys.readouterr().err
