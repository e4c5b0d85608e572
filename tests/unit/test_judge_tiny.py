"""`evalsuite tiny-ckpt --arch llama_text`: a tiny text Llama a local judge can serve (two seeds, two judges)."""
from __future__ import annotations

import json


def test_tiny_llama_text_is_a_servable_judge(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evalsuite.commands import tiny_ckpt
    from evalsuite.identity import checkpoint_hash
    from evalsuite.judge.server import check_servable
    from evalsuite.kit.text_llm import build_tiny_llama_text

    import argparse

    args = argparse.Namespace(out=str(tmp_path / "j1"), kind="vlm", arch="llama_text", seed=1, vllm_compatible=False)
    assert tiny_ckpt.main(args) == 0
    a = check_servable(tmp_path / "j1")
    b = build_tiny_llama_text(tmp_path / "j2", seed=2)
    again = build_tiny_llama_text(tmp_path / "j1b", seed=1)
    assert checkpoint_hash(a) != checkpoint_hash(b) and checkpoint_hash(a) == checkpoint_hash(again)
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["head_dim"] >= 32
    assert cfg["hidden_size"] == cfg["num_attention_heads"] * cfg["head_dim"]
    tok = AutoTokenizer.from_pretrained(a, local_files_only=True)
    text = tok.apply_chat_template([{"role": "user", "content": "Rating: 3"}], tokenize=False, add_generation_prompt=True)
    assert text == "USER: Rating: 3\nASSISTANT:"
    model = AutoModelForCausalLM.from_pretrained(a, local_files_only=True, use_safetensors=True)
    ids = tok(text, return_tensors="pt").input_ids
    assert tok.unk_token_id not in ids[0].tolist()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > ids.shape[1]
