"""Tiny, real HF checkpoints built offline and deterministically by seed.

`build_tiny_vlm` writes a random-init `LlavaForConditionalGeneration` (tiny CLIP vision tower + tiny
Llama) with a word-level tokenizer trained on the synthetic world's vocabulary, a `LlavaProcessor`
and a LLaVA-1.5 chat template; `build_tiny_clip` writes a tiny `CLIPModel` + `CLIPProcessor`.
Both are saved with `save_pretrained` (safetensors) and reload from the directory alone, so tests
exercise exactly the loading code real users run on llava-hf / openai CLIP directories.

    evalsuite tiny-ckpt --out /tmp/tiny --kind vlm --seed 0
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

log = logging.getLogger(__name__)

VLM_SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<image>"]
# CLIP's text tower pools at the EOS position, except that eos_token_id == 2 selects a legacy
# argmax(input_ids) pooling: keep </s> away from id 2 in the CLIP tokenizer.
CLIP_SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]

# Renders as llava-1.5-hf's own template does: every turn is its role and text followed by one space
# ("USER: <image>\n{q} ASSISTANT: {a} USER: ..."), a system message is its text and a space with no role
# name (with CSR's system prompt that is LLaVA's Vicuna v1 "SYSTEM USER: <image>\n{q} ASSISTANT:"), images
# come before the text of their turn, no EOS is written (the collators append it) and the generation
# prompt is "ASSISTANT:". Accepts plain string content too.
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'user' %}USER: {% elif m['role'] == 'assistant' %}ASSISTANT: {% endif -%}"
    "{%- if m['content'] is string %}{{ m['content'] }} {% else -%}"
    "{%- for c in m['content'] if c['type'] == 'image' %}<image>\n{% endfor -%}"
    "{%- for c in m['content'] if c['type'] == 'text' %}{{ c['text'] }} {% endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}ASSISTANT:{% endif -%}"
)

TEMPLATE_TEXT = ["USER: ASSISTANT:", ". , ! ? ' : ; ( ) -"]


def default_corpus() -> list[str]:
    from evalsuite.world.vocab import corpus

    return list(corpus()) + TEMPLATE_TEXT


def build_word_tokenizer(corpus: Iterable[str], specials: list[str], append_eos: bool = False):
    """Word-level `tokenizers` model over `corpus` (lower-cased, punctuation split off)."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from tokenizers.trainers import WordLevelTrainer

    tok = Tokenizer(WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(sorted(set(corpus)), WordLevelTrainer(special_tokens=specials, min_frequency=1))
    # WordLevel has no decoder of its own; WordPiece's joins with spaces and glues punctuation.
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    if append_eos:
        eos = tok.token_to_id("</s>")
        tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", eos)])
    return tok


def _fast_tokenizer(tok, **kwargs):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>", **kwargs
    )


def build_tiny_vlm(
    out: str | Path,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    image_size: int = 32,
    patch_size: int = 16,
    corpus: Iterable[str] | None = None,
    vision_from: str | Path | None = None,
    vision_feature_layer: int = -1,
    vllm_compatible: bool = False,
) -> Path:
    """Write a tiny LLaVA checkpoint to `out`; the same seed gives bit-identical weights.

    The weights are saved under llava-hf's names (`vision_tower.vision_model.*`), as real LLaVA checkpoints
    are: vLLM's loader reads only those, transformers reads both into identical weights (and writes them
    back under the names it read). `vllm_compatible` only marks the manifest; the head size is the
    caller's (`build_tiny_family` raises it to 32, which vLLM's CPU kernels need).

    The default 32 px input with 16 px patches gives 4 image tokens, one per cell of the world's
    2x2 scene grid: measured here, that is what lets a tiny model ground objects at all.
    `vision_from`: a CLIPModel directory whose vision tower (config and weights) becomes the VLM's,
    as LLaVA starts from a pretrained CLIP; its image size and patch size then replace the arguments.
    """
    import torch
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    out = Path(out)
    torch.manual_seed(seed)
    clip = _load_clip(vision_from) if vision_from is not None else None
    if clip is not None:
        vision_config = CLIPVisionConfig(**clip.config.vision_config.to_dict())
        image_size, patch_size = vision_config.image_size, vision_config.patch_size
    else:
        vision_config = CLIPVisionConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            image_size=image_size, patch_size=patch_size,
        )
    tok = _fast_tokenizer(
        build_word_tokenizer(corpus if corpus is not None else default_corpus(), VLM_SPECIALS),
        extra_special_tokens={"image_token": "<image>"},
        padding_side="left",
        model_max_length=512,
    )
    tok.chat_template = CHAT_TEMPLATE
    image_proc = CLIPImageProcessor(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    processor = LlavaProcessor(
        image_processor=image_proc, tokenizer=tok, patch_size=patch_size,
        vision_feature_select_strategy="default", num_additional_image_tokens=1,
        image_token="<image>", chat_template=CHAT_TEMPLATE,
    )
    n_image_tokens = (image_size // patch_size) ** 2
    config = LlavaConfig(
        vision_config=vision_config,
        text_config=LlamaConfig(
            vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        ),
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        image_seq_length=n_image_tokens,
        vision_feature_select_strategy="default",
        vision_feature_layer=vision_feature_layer,
        pad_token_id=tok.pad_token_id,
    )
    model = LlavaForConditionalGeneration(config).eval()
    if clip is not None:
        model.model.vision_tower.load_state_dict(clip.vision_model.state_dict(), strict=True)
    gc = model.generation_config
    gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    model.save_pretrained(out, safe_serialization=True)
    llava_hf_layout(out)
    processor.save_pretrained(out)
    extra = {"vllm_compatible": True} if vllm_compatible else {}  # the default's manifest is unchanged
    _write_kit_manifest(out, kind="tiny-vlm", seed=seed, config={
        "hidden": hidden, "layers": layers, "image_size": image_size, "patch_size": patch_size,
        "vision_feature_layer": vision_feature_layer, "vision_from": str(vision_from) if vision_from else None,
        **extra})
    log.info("tiny VLM (%d params, vocab %d) -> %s", model.num_parameters(), len(tok), out)
    return out


def llava_hf_layout(out: Path) -> None:
    """Rename a saved LLaVA's `vision_tower.X` weights to llava-hf's `vision_tower.vision_model.X`.

    transformers 5 saves the CLIP tower without its `vision_model.` level and reads either layout; vLLM's
    LLaVA loader reads only the llava-hf one ("no module or parameter named 'vision_tower.embeddings'")."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    for shard in sorted(Path(out).glob("*.safetensors")):
        with safe_open(str(shard), "pt") as fh:
            meta = fh.metadata()
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        renamed = {("vision_tower.vision_model." + k[len("vision_tower."):]
                    if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model.") else k): v
                   for k, v in tensors.items()}
        save_file(renamed, str(shard), metadata=meta)
    index = Path(out) / "model.safetensors.index.json"
    if index.is_file():
        import json

        data = json.loads(index.read_text())
        data["weight_map"] = {("vision_tower.vision_model." + k[len("vision_tower."):]
                               if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model.")
                               else k): v for k, v in data["weight_map"].items()}
        index.write_text(json.dumps(data, indent=2))


def build_tiny_clip(
    out: str | Path, seed: int = 0, hidden: int = 64, image_size: int = 32, patch_size: int = 4,
    corpus: Iterable[str] | None = None,
) -> Path:
    """Write a tiny CLIPModel + CLIPProcessor to `out` (text max length 32 tokens)."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTextConfig, CLIPVisionConfig

    out = Path(out)
    torch.manual_seed(seed)
    max_len = 32
    tok = _fast_tokenizer(
        build_word_tokenizer(corpus if corpus is not None else default_corpus(), CLIP_SPECIALS, append_eos=True),
        model_max_length=max_len, padding_side="right",
    )
    config = CLIPConfig(
        text_config=CLIPTextConfig(
            vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
            num_attention_heads=2, max_position_embeddings=max_len, pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        ),
        vision_config=CLIPVisionConfig(
            hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2,
            image_size=image_size, patch_size=patch_size,
        ),
        projection_dim=hidden,
    )
    model = CLIPModel(config).eval()
    image_proc = CLIPImageProcessor(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    model.save_pretrained(out, safe_serialization=True)
    CLIPProcessor(image_processor=image_proc, tokenizer=tok).save_pretrained(out)
    _write_kit_manifest(out, kind="tiny-clip", seed=seed, config={"hidden": hidden, "image_size": image_size,
                        "patch_size": patch_size})
    log.info("tiny CLIP (%d params) -> %s", model.num_parameters(), out)
    return out


def _load_clip(path: str | Path):
    from transformers import CLIPModel

    return CLIPModel.from_pretrained(Path(path), local_files_only=True, use_safetensors=True)


def _write_kit_manifest(out: Path, kind: str, seed: int, config: dict) -> None:
    from evalsuite.manifest import write_manifest

    write_manifest(out, iteration=0, parent=None, method=kind, config={"seed": seed, **config})
