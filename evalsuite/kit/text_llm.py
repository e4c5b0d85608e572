"""A tiny text-only Llama that `vllm serve` serves: the offline stand-in for an LLM judge.

    evalsuite tiny-ckpt --arch llama_text --seed 1 --out /tmp/judge1     # two seeds = two judges

Heads of 32 (vLLM's CPU attention has no narrower kernel), a word-level tokenizer over the synthetic
world's words and the judge prompts' words, a chat template, safetensors, 4096 positions (an MMHal judge
prompt is about 1,400 of its tokens). Random weights: its ratings are noise, its replies are real.
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

ARCH = "llama_text"
# plain-text chat turns; the generation prompt is "ASSISTANT:"
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' %}{{ m['content'] + '\\n' }}"
    "{%- elif m['role'] == 'user' %}{{ 'USER: ' + m['content'] + '\\n' }}"
    "{%- else %}{{ 'ASSISTANT: ' + m['content'] + '</s>\\n' }}{% endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}ASSISTANT:{% endif -%}"
)
JUDGE_WORDS = [("Rating : 0 1 2 3 4 5 6 , very somewhat not informative with no hallucination analysis reasoning "
                "good response image question answer yes the a is of in and")]


def build_tiny_llama_text(out: str | Path, seed: int = 0, hidden: int = 128, layers: int = 2,
                          max_positions: int = 4096) -> Path:
    """Write the checkpoint to `out`; the same seed gives bit-identical weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from evalsuite.errors import UserError
    from evalsuite.kit.tiny import _write_kit_manifest, build_word_tokenizer, default_corpus

    if hidden % 32 or hidden < 32:
        raise UserError(f"hidden: {hidden} is not a multiple of 32 (heads of 32 for vLLM)")
    out = Path(out)
    words = list(default_corpus()) + JUDGE_WORDS + ["USER: ASSISTANT: ### - ."]
    tok = PreTrainedTokenizerFast(tokenizer_object=build_word_tokenizer(words, ["<pad>", "<s>", "</s>", "<unk>"]),
                                  pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                  model_max_length=max_positions)
    tok.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=hidden // 32, num_key_value_heads=max(1, hidden // 64),
                         head_dim=32, max_position_embeddings=max_positions, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    gc = model.generation_config
    gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    _write_kit_manifest(out, kind=f"tiny-{ARCH}", seed=seed, config={"arch": ARCH, "hidden": hidden, "layers": layers})
    log.info("tiny %s (%d params, vocab %d) -> %s", ARCH, model.num_parameters(), len(tok), out)
    return out
