"""Tiny random-init checkpoints of every transformers-native VLM family, built offline by seed.

    evalsuite tiny-ckpt --arch qwen2_vl --out /tmp/tiny-qwen2vl

Each family gets its real model and processor classes (saved with `save_pretrained`, reloaded by
`AutoModelForImageTextToText` + `AutoProcessor`), the word-level tokenizer of `kit.tiny` plus the
family's own special tokens, 32-64 px images and a chat template written after the family's real
one (same roles, image placement, system-message handling and end-of-turn token). PaliGemma ships
no chat template, as the real checkpoints do. `llava` is `kit.tiny.build_tiny_vlm`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

# ChatML, as Qwen-family and LLaVA-OneVision templates render it; `{image}` is the family's placeholder.
# A system message renders as its own turn; qwen2/2.5 insert a default one when none is given.
_CHATML = (
    "{%- if messages[0]['role'] != 'system' and DEFAULT_SYSTEM %}<|im_start|>system\n{{ DEFAULT_SYSTEM }}<|im_end|>\n"
    "{% endif -%}"
    "{%- for m in messages -%}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] -%}"
    "{%- if c['type'] == 'image' %}IMAGE{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif -%}"
    "{%- endfor %}{% endif %}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)


def _chatml(image: str, default_system: str = "") -> str:
    return _CHATML.replace("DEFAULT_SYSTEM", repr(default_system)).replace("IMAGE", image)


# Idefics3 / SmolVLM: "<|im_start|>User:<image>text<end_of_utterance>\nAssistant: ...".
_IDEFICS3 = (
    "<|im_start|>{%- for m in messages -%}{{ m['role'] | capitalize }}:"
    "{%- if m['content'] is string %} {{ m['content'] }}{% else %}{% for c in m['content'] -%}"
    "{%- if c['type'] == 'image' %}<image>{% elif c['type'] == 'text' %} {{ c['text'] }}{% endif -%}"
    "{%- endfor %}{% endif %}<end_of_utterance>\n{% endfor -%}"
    "{%- if add_generation_prompt %}Assistant:{% endif -%}"
)

# Gemma3: the system text opens the first user turn; images become <start_of_image>.
_GEMMA3 = (
    "{{ bos_token }}{%- set sys = '' -%}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set sys = (messages[0]['content'] if messages[0]['content'] is string "
    "else messages[0]['content'][0]['text']) + '\n\n' -%}{%- set messages = messages[1:] -%}{%- endif -%}"
    "{%- for m in messages -%}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{% if loop.first %}{{ sys }}{% endif %}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] -%}"
    "{%- if c['type'] == 'image' %}<start_of_image>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif -%}"
    "{%- endfor %}{% endif %}<end_of_turn>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<start_of_turn>model\n{% endif -%}"
)

TEMPLATE_WORDS = ["system user assistant model you are a helpful . : User Assistant System"]


@dataclass
class _Tokens:
    """Special tokens of a family: role names for `PreTrainedTokenizerFast` + extras by attribute name."""

    bos: str | None = "<s>"
    eos: str = "</s>"
    pad: str = "<pad>"
    extra: dict[str, str] = field(default_factory=dict)  # tokenizer attribute -> token (image_token, ...)
    more: list[str] = field(default_factory=list)         # further special tokens (template markers)

    def specials(self) -> list[str]:
        names = [self.pad, self.bos, self.eos, "<unk>", *self.extra.values(), *self.more]
        return list(dict.fromkeys(n for n in names if n))


def _tokenizer(tokens: _Tokens, corpus):
    from transformers import PreTrainedTokenizerFast

    from evalsuite.kit.tiny import build_word_tokenizer, default_corpus

    words = list(corpus if corpus is not None else default_corpus()) + TEMPLATE_WORDS
    return PreTrainedTokenizerFast(
        tokenizer_object=build_word_tokenizer(words, tokens.specials()), pad_token=tokens.pad,
        unk_token="<unk>", bos_token=tokens.bos, eos_token=tokens.eos, extra_special_tokens=dict(tokens.extra),
        padding_side="left", model_max_length=1024,
    )


def _text(name: str, tok, hidden: int, layers: int, **kw):
    """A tiny text config of transformers class `name` (LlamaConfig, Qwen2Config, GemmaConfig, ...)."""
    import transformers

    return getattr(transformers, name)(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **kw)


def _clip_vision(image_size: int, patch: int):
    from transformers import CLIPVisionConfig

    return CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                            image_size=image_size, patch_size=patch)


def _siglip_vision(image_size: int, patch: int, **kw):
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                              image_size=image_size, patch_size=patch, **kw)


VICUNA = _Tokens(extra={"image_token": "<image>"})
CHATML = dict(bos=None, eos="<|im_end|>", pad="<|endoftext|>", more=["<|im_start|>"])
PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64]]


def _llava_next(corpus, hidden, layers):
    from transformers import (LlavaNextConfig, LlavaNextForConditionalGeneration, LlavaNextImageProcessor,
                              LlavaNextProcessor)

    from evalsuite.kit.tiny import CHAT_TEMPLATE

    tok = _tokenizer(VICUNA, corpus)
    proc = LlavaNextProcessor(
        image_processor=LlavaNextImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                                                image_grid_pinpoints=PINPOINTS),
        tokenizer=tok, patch_size=16, vision_feature_select_strategy="default", num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE)
    config = LlavaNextConfig(vision_config=_clip_vision(32, 16), text_config=_text("LlamaConfig", tok, hidden, layers),
                             image_grid_pinpoints=PINPOINTS, vision_feature_select_strategy="default",
                             vision_feature_layer=-1, image_token_index=tok.image_token_id, image_seq_length=4)
    return LlavaNextForConditionalGeneration(config), proc


def _llava_onevision(corpus, hidden, layers):
    from transformers import (LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration,
                              LlavaOnevisionImageProcessor, LlavaOnevisionProcessor, LlavaOnevisionVideoProcessor)

    tok = _tokenizer(_Tokens(**CHATML, extra={"image_token": "<image>", "video_token": "<video>"}), corpus)
    proc = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size={"height": 32, "width": 32}, image_grid_pinpoints=PINPOINTS),
        video_processor=LlavaOnevisionVideoProcessor(size={"height": 32, "width": 32}),
        tokenizer=tok, num_image_tokens=4, vision_feature_select_strategy="full", vision_aspect_ratio="anyres_max_9",
        chat_template=_chatml("<image>\n"))
    config = LlavaOnevisionConfig(vision_config=_siglip_vision(32, 16), text_config=_text("Qwen2Config", tok, hidden, layers),
                                  image_grid_pinpoints=PINPOINTS, vision_feature_select_strategy="full",
                                  vision_feature_layer=-1, image_token_index=tok.image_token_id,
                                  video_token_index=tok.video_token_id)
    return LlavaOnevisionForConditionalGeneration(config), proc


QWEN_EXTRA = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
              "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>"}
QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


QWEN_PATCH = 8  # 64 px world images -> 8x8 patches -> 4x4 = 16 image tokens after the 2x2 merge


def _qwen_processor(tok, version: str):
    import transformers as tf

    kw = dict(patch_size=QWEN_PATCH, merge_size=2, temporal_patch_size=2,
              size={"shortest_edge": (2 * QWEN_PATCH) ** 2, "longest_edge": (8 * QWEN_PATCH) ** 2})
    image = tf.Qwen2VLImageProcessor(**kw)
    if version == "qwen3_vl":  # no default system turn in Qwen3-VL's template
        return tf.Qwen3VLProcessor(image_processor=image, video_processor=tf.Qwen3VLVideoProcessor(**kw),
                                   tokenizer=tok, chat_template=_chatml(QWEN_IMAGE))
    cls = tf.Qwen2_5_VLProcessor if version == "qwen2_5_vl" else tf.Qwen2VLProcessor
    return cls(image_processor=image, video_processor=tf.Qwen2VLVideoProcessor(**kw), tokenizer=tok,
               chat_template=_chatml(QWEN_IMAGE, "You are a helpful assistant."))


def _mrope_sections(head_dim: int) -> list[int]:
    """Temporal/height/width split of the rotary half-dimension (Qwen's 16/24/24 of 64, scaled): 8 -> 2/3/3."""
    half = head_dim // 2
    t = half // 4
    return [t, (half - t) // 2, half - t - (half - t) // 2]


def _qwen_vl(version: str):
    def build(corpus, hidden, layers):
        import transformers as tf

        tok = _tokenizer(_Tokens(**CHATML, extra=QWEN_EXTRA), corpus)
        ids = dict(image_token_id=tok.image_token_id, video_token_id=tok.video_token_id,
                   vision_start_token_id=tok.vision_start_token_id, vision_end_token_id=tok.vision_end_token_id)
        head = hidden // 4
        rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": _mrope_sections(head)}
        text = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                    rope_parameters=rope, pad_token_id=tok.pad_token_id, bos_token_id=None, eos_token_id=tok.eos_token_id)
        vision = dict(depth=2, num_heads=2, patch_size=QWEN_PATCH)
        if version == "qwen2_vl":
            config = tf.Qwen2VLConfig(text_config=text, vision_config=tf.Qwen2VLVisionConfig(
                embed_dim=32, hidden_size=hidden, **vision), **ids)
            model_cls = tf.Qwen2VLForConditionalGeneration
        elif version == "qwen2_5_vl":
            config = tf.Qwen2_5_VLConfig(text_config=text, vision_config=tf.Qwen2_5_VLVisionConfig(
                hidden_size=32, intermediate_size=64, out_hidden_size=hidden, window_size=32,
                fullatt_block_indexes=[1], **vision), **ids)
            model_cls = tf.Qwen2_5_VLForConditionalGeneration
        else:
            text = {**text, "head_dim": head, "rope_parameters": {**rope, "mrope_interleaved": True}}
            config = tf.Qwen3VLConfig(text_config=text, vision_config=tf.Qwen3VLVisionConfig(
                hidden_size=32, intermediate_size=64, out_hidden_size=hidden, num_position_embeddings=64,
                deepstack_visual_indexes=[0], **vision), **ids)
            model_cls = tf.Qwen3VLForConditionalGeneration
        return model_cls(config), _qwen_processor(tok, version)

    return build


def _idefics3_tokens() -> _Tokens:
    grid = [f"<row_{r}_col_{c}>" for r in (1, 2) for c in (1, 2)]
    return _Tokens(bos="<|im_start|>", eos="<end_of_utterance>", pad="<pad>",
                   extra={"image_token": "<image>", "fake_image_token": "<fake_token_around_image>",
                          "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"},
                   more=grid)


def _idefics3(smol: bool):
    def build(corpus, hidden, layers):
        import transformers as tf

        tok = _tokenizer(_idefics3_tokens(), corpus)
        sizes = dict(size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=True)
        vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                      image_size=32, patch_size=8)
        if smol:
            proc = tf.SmolVLMProcessor(image_processor=tf.SmolVLMImageProcessor(**sizes),
                                       video_processor=tf.SmolVLMVideoProcessor(),
                                       tokenizer=tok, image_seq_len=4, chat_template=_IDEFICS3)
            config = tf.SmolVLMConfig(vision_config=tf.SmolVLMVisionConfig(**vision), text_config=_text("LlamaConfig", tok, hidden, layers),
                                      scale_factor=2, image_token_id=tok.image_token_id)
            return tf.SmolVLMForConditionalGeneration(config), proc
        proc = tf.Idefics3Processor(image_processor=tf.Idefics3ImageProcessor(**sizes), tokenizer=tok,
                                    image_seq_len=4, chat_template=_IDEFICS3)
        config = tf.Idefics3Config(vision_config=tf.Idefics3VisionConfig(**vision),
                                   text_config=_text("LlamaConfig", tok, hidden, layers), scale_factor=2,
                                   image_token_id=tok.image_token_id)
        return tf.Idefics3ForConditionalGeneration(config), proc

    return build


def _internvl(corpus, hidden, layers):
    import transformers as tf

    tok = _tokenizer(_Tokens(**CHATML, extra={
        "start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
        "video_token": "<video>"}), corpus)
    proc = tf.InternVLProcessor(
        image_processor=tf.GotOcr2ImageProcessor(size={"height": 32, "width": 32}, crop_to_patches=True, max_patches=4),
        video_processor=tf.InternVLVideoProcessor(size={"height": 32, "width": 32}),
        tokenizer=tok, image_seq_length=4, chat_template=_chatml("<IMG_CONTEXT>\n"))
    vision = tf.InternVLVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                     image_size=[32, 32], patch_size=[8, 8])
    config = tf.InternVLConfig(vision_config=vision, text_config=_text("Qwen2Config", tok, hidden, layers),
                               image_token_id=tok.context_image_token_id, image_seq_length=4, downsample_ratio=0.5)
    return tf.InternVLForConditionalGeneration(config), proc


def _gemma3(corpus, hidden, layers):
    import transformers as tf

    tok = _tokenizer(_Tokens(bos="<bos>", eos="<end_of_turn>", pad="<pad>", more=["<start_of_turn>", "<eos>"], extra={
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}), corpus)
    image = tf.Gemma3ImageProcessor(size={"height": 32, "width": 32})
    proc = tf.Gemma3Processor(image_processor=image, tokenizer=tok, image_seq_length=4, chat_template=_GEMMA3)
    text = _text("Gemma3TextConfig", tok, hidden, layers, head_dim=hidden // 4, query_pre_attn_scalar=hidden // 4,
                 sliding_window=16)
    config = tf.Gemma3Config(text_config=text, vision_config=_siglip_vision(32, 8, vision_use_head=False),
                             mm_tokens_per_image=4, boi_token_index=tok.boi_token_id,
                             eoi_token_index=tok.eoi_token_id, image_token_index=tok.image_token_id)
    return tf.Gemma3ForConditionalGeneration(config), proc


def _paligemma(corpus, hidden, layers):
    import transformers as tf

    tok = _tokenizer(_Tokens(bos="<bos>", eos="<eos>", pad="<pad>", extra={"image_token": "<image>"}), corpus)
    image = tf.SiglipImageProcessor(size={"height": 32, "width": 32})
    image.image_seq_length = 4
    proc = tf.PaliGemmaProcessor(image_processor=image, tokenizer=tok)  # no chat template, as released
    text = _text("GemmaConfig", tok, hidden, layers, head_dim=hidden // 4)
    # Untied head: with tied random embeddings the prefix's last token (PaliGemma prompts end with the
    # question's ".") is the top next token, and every CSR beam stops at once.
    config = tf.PaliGemmaConfig(vision_config=_siglip_vision(32, 16, projection_dim=hidden), text_config=text,
                                image_token_index=tok.image_token_id, projection_dim=hidden,
                                tie_word_embeddings=False)
    return tf.PaliGemmaForConditionalGeneration(config), proc


BUILDERS: dict[str, Callable] = {
    "llava_next": _llava_next,
    "llava_onevision": _llava_onevision,
    "qwen2_vl": _qwen_vl("qwen2_vl"),
    "qwen2_5_vl": _qwen_vl("qwen2_5_vl"),
    "qwen3_vl": _qwen_vl("qwen3_vl"),
    "idefics3": _idefics3(smol=False),
    "smolvlm": _idefics3(smol=True),
    "internvl": _internvl,
    "gemma3": _gemma3,
    "paligemma": _paligemma,
}
ARCHS = ("llava", *BUILDERS)


VLLM_HIDDEN = 128  # 4 heads of 32: vLLM's CPU attention has no kernel for the default 16-wide heads


def build_tiny_family(arch: str, out: str | Path, seed: int = 0, hidden: int = 64, layers: int = 2,
                      corpus=None, vllm_compatible: bool = False) -> Path:
    """Write a tiny checkpoint of family `arch` to `out`; the same seed gives bit-identical weights.

    `vllm_compatible`: a checkpoint vLLM loads and runs on CPU too (docs/engines.md): text heads of
    32 (hidden 128 unless a wider one is asked for) and, for LLaVA, llava-hf's weight names."""
    import torch

    from evalsuite.errors import UserError
    from evalsuite.kit.tiny import _write_kit_manifest, build_tiny_vlm

    if vllm_compatible:
        hidden = max(hidden, VLLM_HIDDEN)
    if arch == "llava":
        return build_tiny_vlm(out, seed=seed, hidden=hidden, layers=layers, corpus=corpus,
                              vllm_compatible=vllm_compatible)
    if arch not in BUILDERS:
        raise UserError(f"--arch {arch!r}: not one of {', '.join(ARCHS)}")
    out = Path(out)
    torch.manual_seed(seed)
    model, processor = BUILDERS[arch](corpus, hidden, layers)
    model.eval()
    tok = processor.tokenizer
    gc = model.generation_config
    gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    extra = {"vllm_compatible": True} if vllm_compatible else {}  # the default's manifest is unchanged
    _write_kit_manifest(out, kind=f"tiny-{arch}", seed=seed, config={"arch": arch, "hidden": hidden, "layers": layers,
                                                                      **extra})
    log.info("tiny %s (%d params, vocab %d) -> %s", arch, model.num_parameters(), len(tok), out)
    return out
