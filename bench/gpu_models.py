"""Random-init VLMs of the released 7B shapes, built on the device, and the FLOP accounting of
bench/gpu_figures.py (this module has no command of its own).

`build_vlm(arch, tiny, device, dtype)` returns an `evalsuite.models.vlm.VLM` (model + processor +
the shared input path) without touching the disk: the model is created from its transformers config
class directly on `device` in `dtype` (`_from_config` under `torch.device(device)`; a CPU init then
a copy would take minutes for 7B parameters), the processor is built offline from the kit's
word-level tokenizer (evalsuite/kit/families.py) padded with filler words to the released
vocabulary size, so every id the random model emits decodes to a word and the LM head has its
real width. `SHAPES[arch]["full"]` are the released checkpoints' numbers (llava-hf/llava-1.5-7b-hf:
Llama-2-7B + CLIP ViT-L/14-336, Qwen/Qwen2-VL-7B-Instruct); `["tiny"]` run the same code in seconds.

Model FLOPs (what MFU divides by the GPU's peak), counted from the tensors that reach each part:
    language-model body   k * N_body * T      T = positions in the forward (padding included)
    LM head               k * N_head * R      R = positions the head projects
    vision tower+projector 2 * N_vis * P      P = patches (CLIP: (H/p)*(W/p) + 1 per image)
with k = 2 for a forward without gradients and 6 for one with gradients (forward + backward, the
usual 6N convention: frozen weights skip their weight-gradient matmul, so LoRA's real backward is
nearer 4N; recomputation under gradient checkpointing is not counted, as MFU conventions do not).
N_body excludes the input embedding table (a lookup); attention's score/value matmuls (about
4 * layers * hidden * context per token, a few % at these lengths) are left out.
"""
from __future__ import annotations

from pathlib import Path

# bf16 dense peak FLOP/s by device-name substring, first match wins (vendor data sheets, SXM unless named)
PEAK_BF16 = (("H200", 989e12), ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12),
             ("A100", 312e12), ("L40S", 362e12))

SHAPES = {
    "llava": {
        "full": dict(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, vocab=32064,
                     v_hidden=1024, v_intermediate=4096, v_layers=24, v_heads=16, image=336, patch=14),
        "tiny": dict(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=512,
                     v_hidden=64, v_intermediate=128, v_layers=2, v_heads=2, image=32, patch=16),
    },
    "qwen2_vl": {
        "full": dict(hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4, vocab=152064,
                     v_hidden=1280, v_layers=32, v_heads=16, image=448, patch=14, rope_theta=1e6,
                     min_pixels=56 * 56, max_pixels=28 * 28 * 1280),
        "tiny": dict(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=512,
                     v_hidden=32, v_layers=2, v_heads=2, image=64, patch=8, rope_theta=1e4,
                     min_pixels=16 * 16, max_pixels=64 * 64),
    },
}
ARCHS = tuple(SHAPES)


def peak_flops(device_name: str | None) -> float | None:
    """bf16 dense peak of a CUDA device by name; None when unknown (CPU, an unlisted GPU).

    "NVIDIA H200" -> 989e12; "NVIDIA H100 PCIe" -> 756e12; "NVIDIA H100 80GB HBM3" -> 989e12; "cpu" -> None."""
    for key, flops in PEAK_BF16:
        if device_name and key in device_name:
            return flops
    return None


def _tokenizer(tokens, vocab: int):
    """The kit's word-level tokenizer for `tokens` (families._Tokens), its vocabulary extended with
    filler words up to `vocab` entries (never fewer than the kit's own words)."""
    from tokenizers.models import WordLevel

    from evalsuite.kit.families import _tokenizer as kit_tokenizer

    tok = kit_tokenizer(tokens, None)
    words = tok.backend_tokenizer.get_vocab(with_added_tokens=False)
    words.update((f"zq{i:06d}", i) for i in range(len(words), vocab))
    tok.backend_tokenizer.model = WordLevel(words, unk_token="<unk>")
    tok.model_max_length = 4096
    return tok


def _llava(s: dict):
    import transformers as tf

    from evalsuite.kit.families import VICUNA
    from evalsuite.kit.tiny import CHAT_TEMPLATE

    tok = _tokenizer(VICUNA, s["vocab"])
    size = s["image"]
    processor = tf.LlavaProcessor(
        image_processor=tf.CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size}),
        tokenizer=tok, patch_size=s["patch"], vision_feature_select_strategy="default",
        num_additional_image_tokens=1, image_token="<image>", chat_template=CHAT_TEMPLATE)
    config = tf.LlavaConfig(
        vision_config=tf.CLIPVisionConfig(hidden_size=s["v_hidden"], intermediate_size=s["v_intermediate"],
                                          num_hidden_layers=s["v_layers"], num_attention_heads=s["v_heads"],
                                          image_size=size, patch_size=s["patch"], hidden_act="quick_gelu"),
        text_config=tf.LlamaConfig(vocab_size=max(s["vocab"], len(tok)), hidden_size=s["hidden"],
                                   intermediate_size=s["intermediate"], num_hidden_layers=s["layers"],
                                   num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                                   max_position_embeddings=4096, rms_norm_eps=1e-5, pad_token_id=tok.pad_token_id,
                                   bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id),
        image_token_index=tok.image_token_id, image_seq_length=(size // s["patch"]) ** 2,
        vision_feature_select_strategy="default", vision_feature_layer=-2, projector_hidden_act="gelu",
        tie_word_embeddings=False)
    return config, processor, tf.LlavaForConditionalGeneration


def _qwen2_vl(s: dict):
    import transformers as tf

    from evalsuite.kit.families import CHATML, QWEN_EXTRA, QWEN_IMAGE, _chatml, _mrope_sections, _Tokens

    tok = _tokenizer(_Tokens(**CHATML, extra=QWEN_EXTRA), s["vocab"])
    kw = dict(patch_size=s["patch"], merge_size=2, temporal_patch_size=2,
              size={"shortest_edge": s["min_pixels"], "longest_edge": s["max_pixels"]})
    processor = tf.Qwen2VLProcessor(image_processor=tf.Qwen2VLImageProcessor(**kw),
                                    video_processor=tf.Qwen2VLVideoProcessor(**kw), tokenizer=tok,
                                    chat_template=_chatml(QWEN_IMAGE, "You are a helpful assistant."))
    rope = {"rope_type": "default", "rope_theta": s["rope_theta"],
            "mrope_section": _mrope_sections(s["hidden"] // s["heads"])}
    text = dict(vocab_size=max(s["vocab"], len(tok)), hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                max_position_embeddings=32768, rms_norm_eps=1e-6, rope_parameters=rope,
                pad_token_id=tok.pad_token_id, bos_token_id=None, eos_token_id=tok.eos_token_id)
    vision = tf.Qwen2VLVisionConfig(depth=s["v_layers"], embed_dim=s["v_hidden"], hidden_size=s["hidden"],
                                    mlp_ratio=4, num_heads=s["v_heads"], patch_size=s["patch"],
                                    spatial_merge_size=2, temporal_patch_size=2)
    config = tf.Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=tok.image_token_id,
                              video_token_id=tok.video_token_id, vision_start_token_id=tok.vision_start_token_id,
                              vision_end_token_id=tok.vision_end_token_id, tie_word_embeddings=False)
    return config, processor, tf.Qwen2VLForConditionalGeneration


BUILDERS = {"llava": _llava, "qwen2_vl": _qwen2_vl}


def build_vlm(arch: str, tiny: bool, device: str, dtype):
    """A random-init `VLM` of `arch` on `device` (seed 0), with the shared input path bound."""
    import torch

    from evalsuite.models.inputs import ModelInputs
    from evalsuite.models.vlm import VLM

    torch.manual_seed(0)
    config, processor, cls = BUILDERS[arch](SHAPES[arch]["tiny" if tiny else "full"])
    with torch.device(device):
        model = cls._from_config(config, dtype=dtype)
    model.eval()
    tok = processor.tokenizer
    gc = model.generation_config
    gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    return VLM(model=model, processor=processor, path=Path(f"<random {arch}>"), device=device,
               inputs=ModelInputs(processor, None, where=arch))


def _parts(model):
    """(language-model body, LM head, [vision modules]) of a LLaVA or Qwen2-VL model."""
    inner = model.model
    vision = [m for m in (getattr(inner, "vision_tower", None), getattr(inner, "multi_modal_projector", None),
                          getattr(inner, "visual", None)) if m is not None]
    return inner.language_model, model.get_output_embeddings(), vision


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


class FlopCounter:
    """Model FLOPs of everything the model runs while attached (formulas: module docstring).

    Hooks see the tensors entering the language-model body, the LM head and the vision tower; a
    forward with gradients enabled counts 6 per parameter and position, one without counts 2.
    `lm_forwards` counts body calls (a `generate` of n new tokens makes n: prefill + n - 1 steps)."""

    def __init__(self, model):
        import torch

        body, head, vision = _parts(model)
        self.n_body = _numel(body) - body.get_input_embeddings().weight.numel()
        self.n_head = head.weight.numel()
        self.n_vision = sum(_numel(m) for m in vision)
        self.patch = model.config.vision_config.patch_size
        self._grad = torch.is_grad_enabled
        self._hooks = [body.register_forward_pre_hook(self._on_body, with_kwargs=True),
                       head.register_forward_pre_hook(self._on_head, with_kwargs=True),
                       vision[0].register_forward_pre_hook(self._on_vision, with_kwargs=True)]
        self.reset()

    def reset(self) -> None:
        self.flops, self.lm_forwards, self.positions = 0.0, 0, 0

    def _k(self) -> int:
        return 6 if self._grad() else 2

    @staticmethod
    def _first(args, kwargs, *names):
        for name in names:
            if kwargs.get(name) is not None:
                return kwargs[name]
        return args[0]

    def _on_body(self, module, args, kwargs):
        x = self._first(args, kwargs, "inputs_embeds", "input_ids")
        t = x.shape[0] * x.shape[1]
        self.flops += self._k() * self.n_body * t
        self.lm_forwards += 1
        self.positions += t

    def _on_head(self, module, args, kwargs):
        x = self._first(args, kwargs, "input")
        self.flops += self._k() * self.n_head * (x.numel() // x.shape[-1])

    def _on_vision(self, module, args, kwargs):
        x = self._first(args, kwargs, "pixel_values", "hidden_states")
        if x.dim() == 4:  # CLIP: images (N, C, H, W) -> patches + the class token per image
            patches = x.shape[0] * ((x.shape[2] // self.patch) * (x.shape[3] // self.patch) + 1)
        else:  # Qwen2-VL: one row per patch (all images flattened)
            patches = x.shape[0]
        self.flops += 2 * self.n_vision * patches

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
