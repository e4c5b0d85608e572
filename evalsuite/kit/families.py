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
    if version.startswith("qwen3_vl"):  # no default system turn in Qwen3-VL's template
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
            vision = dict(hidden_size=32, intermediate_size=64, out_hidden_size=hidden, num_position_embeddings=64,
                          deepstack_visual_indexes=[0], **vision)
            if version == "qwen3_vl_moe":  # every text layer a mixture of 4 experts, 2 per token
                text = {**text, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": hidden,
                        "decoder_sparse_step": 1}
                config = tf.Qwen3VLMoeConfig(text_config=text, vision_config=tf.Qwen3VLMoeVisionConfig(**vision),
                                             **ids)
                model_cls = tf.Qwen3VLMoeForConditionalGeneration
            else:
                config = tf.Qwen3VLConfig(text_config=text, vision_config=tf.Qwen3VLVisionConfig(**vision), **ids)
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
                               image_token_id=tok.context_image_token_id, image_seq_length=4, downsample_ratio=0.5,
                               tie_word_embeddings=False)  # tied random embeddings echo the prompt (one path per CSR tree)
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


# ---------------------------------------------------------------- families added for issue 26
def _blip(instruct: bool):
    """BLIP-2 (OPT text model, as blip2-opt-2.7b) / InstructBLIP (Vicuna-style Llama): no chat template, as
    released; the processor prepends `num_query_tokens` image tokens itself."""
    def build(corpus, hidden, layers):
        import transformers as tf

        # "<image>" is a special token but no tokenizer attribute, as in Salesforce/blip2-*: the processor
        # then holds it as an `AddedToken` (what a released checkpoint hands the generic path)
        tok = _tokenizer(_Tokens(bos="</s>" if not instruct else "<s>", eos="</s>", pad="<pad>",
                                 more=["<image>"]), corpus)
        image_id = tok.convert_tokens_to_ids("<image>")
        image = tf.BlipImageProcessor(size={"height": 32, "width": 32})
        # initializer_range: BLIP's vision default (1e-10) leaves a fresh tower's output ~1e-7, an image-blind model
        vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                      image_size=32, patch_size=16, initializer_range=0.02)
        qformer = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                       encoder_hidden_size=64, vocab_size=len(tok), max_position_embeddings=128)
        if not instruct:
            text = tf.OPTConfig(vocab_size=len(tok), hidden_size=hidden, ffn_dim=2 * hidden, num_hidden_layers=layers,
                                num_attention_heads=4, word_embed_proj_dim=hidden, max_position_embeddings=1024,
                                tie_word_embeddings=False,  # as PaliGemma's: tied random embeddings echo the prompt
                                pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                                eos_token_id=tok.eos_token_id)
            config = tf.Blip2Config(vision_config=tf.Blip2VisionConfig(**vision),
                                    qformer_config=tf.Blip2QFormerConfig(**qformer), text_config=text,
                                    num_query_tokens=4, image_token_index=image_id)
            proc = tf.Blip2Processor(image_processor=image, tokenizer=tok, num_query_tokens=4)
            return _image_weighted_qformer(tf.Blip2ForConditionalGeneration(config)), proc
        qtok = _tokenizer(_Tokens(bos="<s>", eos="</s>", pad="<pad>"), corpus)
        qtok.padding_side = "right"
        config = tf.InstructBlipConfig(vision_config=tf.InstructBlipVisionConfig(**vision),
                                       qformer_config=tf.InstructBlipQFormerConfig(**qformer),
                                       text_config=_text("LlamaConfig", tok, hidden, layers),
                                       num_query_tokens=4, image_token_index=image_id)
        proc = tf.InstructBlipProcessor(image_processor=image, tokenizer=tok, qformer_tokenizer=qtok,
                                        num_query_tokens=4)
        return _image_weighted_qformer(tf.InstructBlipForConditionalGeneration(config)), proc

    return build


QFORMER_CROSS_STD = 0.3


def _image_weighted_qformer(model):
    """The Q-Former's cross-attention (its only path from the image) at a larger init scale. At the 0.02 of
    the rest, what the image adds to the query tokens is ~2% of their residual stream, and the post-LayerNorms
    wash it out: real vs grey moved BLIP-2's next-token log-probs by ~3e-3 and its greedy answers not at
    all. At 0.3, about LLaVA's 0.2 (value and output projections only; the queries still choose what to read)."""
    import torch

    with torch.no_grad():
        for name, module in model.qformer.named_modules():
            if name.endswith(("crossattention.attention.value", "crossattention.output.dense")):
                module.weight.normal_(0.0, QFORMER_CROSS_STD)
    return model


# Llama-3.2-Vision-Instruct: header-delimited turns, the image before the user text, <|eot_id|> ends a turn.
_MLLAMA = (
    "{{ bos_token }}{%- for m in messages -%}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] -%}"
    "{%- if c['type'] == 'image' %}<|image|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif -%}"
    "{%- endfor %}{% endif %}<|eot_id|>{% endfor -%}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif -%}"
)


def _mllama(corpus, hidden, layers):
    import transformers as tf

    tok = _tokenizer(_Tokens(bos="<|begin_of_text|>", eos="<|eot_id|>", pad="<|finetune_right_pad_id|>",
                             extra={"image_token": "<|image|>"},
                             more=["<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>"]), corpus)
    image = tf.MllamaImageProcessor(size={"height": 32, "width": 32}, max_image_tiles=1)
    proc = tf.MllamaProcessor(image_processor=image, tokenizer=tok, chat_template=_MLLAMA)
    vision = tf.MllamaVisionConfig(hidden_size=64, num_hidden_layers=2, num_global_layers=1, attention_heads=2,
                                   intermediate_size=128, vision_output_dim=128, image_size=32, patch_size=16,
                                   max_num_tiles=1, intermediate_layers_indices=[0], supported_aspect_ratios=[[1, 1]])
    text = tf.MllamaTextConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                               num_hidden_layers=layers + 1, num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=1024, cross_attention_layers=[1],
                               pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                               eos_token_id=tok.eos_token_id)
    config = tf.MllamaConfig(vision_config=vision, text_config=text, image_token_index=tok.image_token_id)
    return tf.MllamaForConditionalGeneration(config), proc


# Mistral-Small-3.1 (Mistral3 + Pixtral tower): "[INST]" turns, the image inside the user turn.
_MISTRAL = (
    "{{ bos_token }}{%- for m in messages -%}"
    "{%- if m['role'] == 'system' %}[SYSTEM_PROMPT]{{ m['content'] if m['content'] is string "
    "else m['content'][0]['text'] }}[/SYSTEM_PROMPT]"
    "{%- elif m['role'] == 'user' %}[INST]{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] -%}{%- if c['type'] == 'image' %}[IMG]{% elif c['type'] == 'text' %}{{ c['text'] }}"
    "{% endif -%}{%- endfor %}{% endif %}[/INST]"
    "{%- else %}{% if m['content'] is string %}{{ m['content'] }}{% else %}{{ m['content'][0]['text'] }}{% endif %}"
    "{{ eos_token }}{% endif -%}{%- endfor -%}"
)


def _mistral3(corpus, hidden, layers):
    import transformers as tf

    tok = _tokenizer(_Tokens(extra={"image_token": "[IMG]", "image_break_token": "[IMG_BREAK]",
                                    "image_end_token": "[IMG_END]"},
                             more=["[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"]), corpus)
    image = tf.PixtralImageProcessor(size={"longest_edge": 32}, patch_size=8)
    proc = tf.PixtralProcessor(image_processor=image, tokenizer=tok, patch_size=8, spatial_merge_size=2,
                               image_token="[IMG]", image_break_token="[IMG_BREAK]", image_end_token="[IMG_END]",
                               chat_template=_MISTRAL)
    vision = tf.PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                    head_dim=32, image_size=32, patch_size=8)
    config = tf.Mistral3Config(vision_config=vision, text_config=_text("MistralConfig", tok, hidden, layers),
                               image_token_index=tok.image_token_id, spatial_merge_size=2, tie_word_embeddings=False)
    return tf.Mistral3ForConditionalGeneration(config), proc


# Idefics2 (idefics2-8b): "User:<image>text<end_of_utterance>\nAssistant:".
_IDEFICS2 = _IDEFICS3.replace("<|im_start|>{%- for", "{{ bos_token }}{%- for")


IDEFICS2_LATENT_STD = 0.005


def _idefics2(corpus, hidden, layers):
    import torch
    import transformers as tf

    tok = _tokenizer(_Tokens(eos="<end_of_utterance>", extra={
        "image_token": "<image>", "image_boundary_token": "<fake_token_around_image>",
        "end_of_utterance_token": "<end_of_utterance>"}), corpus)
    image = tf.Idefics2ImageProcessor(size={"shortest_edge": 32, "longest_edge": 32}, do_image_splitting=False)
    proc = tf.Idefics2Processor(image_processor=image, tokenizer=tok, image_seq_len=4, chat_template=_IDEFICS2)
    vision = tf.Idefics2VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                     image_size=32, patch_size=8)
    perceiver = tf.Idefics2PerceiverConfig(hidden_size=hidden, resampler_n_latents=4, resampler_depth=1,
                                           resampler_n_heads=2, resampler_head_dim=16, num_key_value_heads=1)
    config = tf.Idefics2Config(vision_config=vision, perceiver_config=perceiver,
                               text_config=_text("MistralConfig", tok, hidden, layers), image_token_id=tok.image_token_id)
    model = tf.Idefics2ForConditionalGeneration(config)
    # transformers starts the resampler's latents at all ones: a fresh model's image attention adds ~1e-3 to
    # them and the final RMSNorm leaves a near-constant output, an image-blind model (real vs grey moved
    # next-token log-probs by ~1e-3). Small random latents let the image decide (about LLaVA's 0.2).
    with torch.no_grad():
        model.model.connector.perceiver_resampler.latents.normal_(0.0, IDEFICS2_LATENT_STD)
    return model, proc


def _lfm2_vl(corpus, hidden, layers):
    import transformers as tf

    tok = _tokenizer(_Tokens(**{**CHATML, "bos": "<|startoftext|>"}, extra={
        "image_token": "<image>", "image_start_token": "<|image_start|>", "image_end_token": "<|image_end|>",
        "image_thumbnail_token": "<|img_thumbnail|>"}), corpus)
    image = tf.Lfm2VlImageProcessor(size={"height": 32, "width": 32}, tile_size=32, encoder_patch_size=8,
                                    min_image_tokens=4, max_image_tokens=16, do_image_splitting=False)
    proc = tf.Lfm2VlProcessor(image_processor=image, tokenizer=tok, chat_template=_chatml("<image>"))
    vision = tf.Siglip2VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                    patch_size=8, num_patches=16)
    text = tf.Lfm2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         full_attn_idxs=[layers - 1], block_auto_adjust_ff_dim=False,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         tie_word_embeddings=False)  # tied random embeddings echo the prompt (one path per CSR tree)
    config = tf.Lfm2VlConfig(vision_config=vision, text_config=text, image_token_id=tok.image_token_id,
                             projector_hidden_size=hidden, downsample_factor=2, tie_word_embeddings=False)
    return tf.Lfm2VlForConditionalGeneration(config), proc


def _no_dead_inputs(model) -> int:
    """Re-initialise what a fresh model leaves at zero and would make it ignore its images (Gemma3's
    `mm_input_projection_weight`, Mllama's tanh cross-attention gates): matrices at normal(0, 0.02), scalar
    gates at 1. Real checkpoints have trained values there; all-zero ones would let a path that drops the
    image pass every test. Returns how many tensors were changed."""
    import torch

    n = 0
    with torch.no_grad():
        for _, p in model.named_parameters():
            if not p.is_floating_point() or p.numel() == 0 or bool(p.any()):
                continue
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            elif p.numel() == 1:
                p.fill_(1.0)
            else:
                continue
            n += 1
    return n


BUILDERS: dict[str, Callable] = {
    "llava_next": _llava_next,
    "llava_onevision": _llava_onevision,
    "qwen2_vl": _qwen_vl("qwen2_vl"),
    "qwen2_5_vl": _qwen_vl("qwen2_5_vl"),
    "qwen3_vl": _qwen_vl("qwen3_vl"),
    "qwen3_vl_moe": _qwen_vl("qwen3_vl_moe"),
    "idefics3": _idefics3(smol=False),
    "smolvlm": _idefics3(smol=True),
    "internvl": _internvl,
    "gemma3": _gemma3,
    "paligemma": _paligemma,
    "blip2": _blip(instruct=False),
    "instructblip": _blip(instruct=True),
    "mllama": _mllama,
    "mistral3": _mistral3,
    "idefics2": _idefics2,
    "lfm2_vl": _lfm2_vl,
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
    _no_dead_inputs(model)
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
