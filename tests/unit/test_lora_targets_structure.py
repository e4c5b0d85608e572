"""LoRA's targets are chosen by what a module does, not by its class alone: only Linear modules whose forward
maps a tensor to one tensor (training/trainers/model.py `maps_tensor_to_tensor`). Llama-4's MoE router is an
`nn.Linear` subclass whose forward returns (scores, logits); wrapped by LoRA, peft's forward crashed with
`AttributeError: 'tuple' object has no attribute 'dtype'`.

Llama-4 is built here from transformers' own classes (the router is the real `Llama4Router`) but is not a kit
family: in transformers 5.24 `Llama4ForConditionalGeneration.forward` itself fails (`outputs.image_outputs`
on its language model's output), so the kit's MoE family is Qwen3-VL-MoE (tests/integration/test_family_matrix.py
runs DPO with LoRA on it). Here the language model's forward (the part of the DPO forward LoRA wraps) runs."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from evalsuite.errors import UserError
from training.trainers.model import language_model, lora_targets


@pytest.fixture(scope="module")
def llama4():
    import transformers as tf

    vision = tf.Llama4VisionConfig(hidden_size=32, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                                   image_size=32, patch_size=8, vision_output_dim=32, projector_input_dim=32,
                                   projector_output_dim=32)
    text = tf.Llama4TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, intermediate_size_mlp=64,
                               num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                               num_local_experts=4, num_experts_per_tok=1, max_position_embeddings=128,
                               attention_chunk_size=128)
    torch.manual_seed(0)
    return tf.Llama4ForConditionalGeneration(tf.Llama4Config(vision_config=vision, text_config=text)).eval()


@pytest.mark.parametrize("scope", ["language_model", "released"])
def test_auto_targets_leave_out_the_moe_router_and_lora_runs(llama4, scope):
    from peft import LoraConfig, get_peft_model

    routers = [n for n, m in llama4.named_modules() if type(m).__name__ == "Llama4Router"]
    assert len(routers) == 2 and all(isinstance(llama4.get_submodule(n), nn.Linear) for n in routers)
    targets = lora_targets(llama4, "auto", scope)
    model = get_peft_model(llama4, LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    try:
        ids = torch.tensor([[1, 5, 9, 3]])
        # with the router a target: AttributeError: 'tuple' object has no attribute 'dtype' (inside peft)
        logits = language_model(model.get_base_model())(input_ids=ids).logits
        assert logits.shape == (1, 4, 64) and torch.isfinite(logits).all()
        assert any("lora_A" in n for n, _ in model.named_parameters())
    finally:
        model.unload()
    assert not set(routers) & set(targets)
    assert {t.split(".")[-1] for t in targets} >= {"q_proj", "o_proj", "gate_proj", "down_proj"}


def test_a_router_named_explicitly_is_one_line(llama4):
    with pytest.raises(UserError, match=r"'router' matches no Linear layer of the language model \(its 2 matches, "
                                        r"e\.g\. .*feed_forward\.router \(Llama4Router\), are Linear subclasses"):
        lora_targets(llama4, "router", "language_model")


def test_plain_linear_subclasses_stay_targets():
    from training.trainers.model import maps_tensor_to_tensor

    class Scaled(nn.Linear):      # its own forward, still one tensor of out_features
        def forward(self, x):
            return super().forward(x) * 2

    class Pair(nn.Linear):        # a router-like forward
        def forward(self, x):
            y = super().forward(x)
            return y, y.softmax(-1)

    class Named(nn.Linear):       # no forward of its own
        pass

    assert maps_tensor_to_tensor(nn.Linear(4, 3)) and maps_tensor_to_tensor(Named(4, 3))
    assert maps_tensor_to_tensor(Scaled(4, 3))
    assert not maps_tensor_to_tensor(Pair(4, 3))
    assert not maps_tensor_to_tensor(Scaled(4, 3, device="meta"))   # cannot be probed: left out
