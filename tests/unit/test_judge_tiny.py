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

    args = argparse.Namespace(out=str(tmp_path / "j1"), kind="vlm", arch="llama_text", seed=1, vllm_compatible=False,
                              reply=None)
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


def test_scripted_judge_says_its_reply_to_any_chat_at_any_temperature(tmp_path):
    """--reply: the greedy (and sampled) continuation of every chat is the reply, then </s>; the reply parses
    for both mmhal (one 'rating: N') and objhal (a JSON list of objects)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evalsuite.identity import checkpoint_hash, prompt_files_id
    from evalsuite.judge.server import check_servable
    from evalsuite.kit.text_llm import build_tiny_llama_text
    from evalsuite.metrics import objhal
    from evalsuite.tasks.mmhal import parse_rating

    reply = '["dog", "rating: 4"]'
    a = check_servable(build_tiny_llama_text(tmp_path / "a", seed=1, reply=reply))
    b = build_tiny_llama_text(tmp_path / "b", seed=1, reply='["cat", "rating: 2"]')
    # the same weights (one seed), another reply token: the tokenizer files tell them apart, as a local
    # judge's identity holds both (evalsuite/judge/judge.py)
    assert checkpoint_hash(a) == checkpoint_hash(b) and prompt_files_id(a) != prompt_files_id(b)
    tok = AutoTokenizer.from_pretrained(a, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(a, local_files_only=True, use_safetensors=True)
    torch.manual_seed(0)
    for messages in ([{"role": "user", "content": "Rating: how many dogs? 3"}],
                     [{"role": "system", "content": "list the objects [End of Question]"}]):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"]
        for kw in ({"do_sample": False}, {"do_sample": True, "temperature": 2.0}):
            out = model.generate(ids, max_new_tokens=8, **kw)[0, ids.shape[1]:]
            assert out.tolist()[-1] == tok.eos_token_id and len(out) == 2
            assert tok.decode(out, skip_special_tokens=True).strip() == reply
    assert parse_rating(reply) == (4, True)
    assert objhal.parse_object_list(reply) == ["dog", "rating: 4"]
