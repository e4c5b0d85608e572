"""A tiny text-only Llama that `vllm serve` serves: the offline stand-in for an LLM judge.

    evalsuite tiny-ckpt --arch llama_text --seed 1 --out /tmp/judge1     # two seeds = two judges

    evalsuite tiny-ckpt --arch llama_text --reply '["dog", "rating: 4"]' --out /tmp/judge_a   # a scripted judge

Heads of 32 (vLLM's CPU attention has no narrower kernel), a word-level tokenizer over the synthetic
world's words and the judge prompts' words, a chat template, safetensors, 4096 positions (an MMHal judge
prompt is about 1,400 of its tokens). Random weights: its ratings are noise, its replies are real.

`reply`: a judge whose greedy answer to any chat is `reply`, so that judged tasks can store results offline
(a random judge's replies follow no format). Its weights are set, not random: every layer's output
projections are zero (the residual stream is the current token's embedding: a bigram model), the reply is
one added token, and the embeddings and head form the chain "ASSISTANT:" -> reply -> </s> (any other last
token -> </s>), with logit gaps of 100, so sampling temperatures up to a few change nothing. One reply can
serve several judged tasks: '["dog", "rating: 4"]' is a JSON list of objects (objhal) holding exactly one
'rating: N' (mmhal). Served by vLLM like any judge; what it says is fixed, everything after it is real.
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
                          max_positions: int = 4096, reply: str | None = None) -> Path:
    """Write the checkpoint to `out`; the same seed gives bit-identical weights (`reply`: module doc)."""
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
    if reply is not None:
        from tokenizers import AddedToken

        if not reply.strip() or "\n" in reply:
            raise UserError("--reply: one non-empty line of text")
        tok.add_tokens([AddedToken(reply, normalized=False, single_word=False)])
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=hidden // 32, num_key_value_heads=max(1, hidden // 64),
                         head_dim=32, max_position_embeddings=max_positions, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    if reply is not None:
        _script(model, tok, reply)
    gc = model.generation_config
    gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    _write_kit_manifest(out, kind=f"tiny-{ARCH}", seed=seed, config={"arch": ARCH, "hidden": hidden, "layers": layers,
                                                                     **({"reply": reply} if reply is not None else {})})
    log.info("tiny %s (%d params, vocab %d) -> %s", ARCH, model.num_parameters(), len(tok), out)
    return out


def _script(model, tok, reply: str) -> None:
    """Weights whose greedy continuation of "... ASSISTANT:" is `reply` then </s> (module doc)."""
    import torch

    last = tok.convert_tokens_to_ids(tok.tokenize("ASSISTANT:"))[-1]   # the generation prompt's last token
    said, eos = tok.convert_tokens_to_ids(reply), tok.eos_token_id
    with torch.no_grad():
        for layer in model.model.layers:   # no layer writes to the residual stream
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        emb.zero_()
        emb[:, 0] = 1.0          # every token: direction 0 ...
        emb[last].zero_()
        emb[last, 1] = 1.0       # ... but the generation prompt's last token: direction 1
        emb[said].zero_()
        emb[said, 2] = 1.0       # and the reply token: direction 2
        head.zero_()
        head[said, 1] = 100.0    # after "ASSISTANT:", the reply
        head[eos, 2] = 100.0     # after the reply, the end
        head[eos, 0] = 100.0     # after anything else, the end
