"""Model setup shared by SFT and DPO: load a local VLM, freeze the vision tower, build the LoRA config.

LoRA targets are resolved to full module names (`lora_targets`). Under `lora_scope: released` (VL-RLHF's and
CSR's rule) bare names match anywhere, as peft matches them: a bare `q_proj` also lands on CLIP's attention.
Under `lora_scope: language_model` (ours) they are matched inside the language model only, found by
structure (`get_decoder()` / `language_model`, not by module names). LoRA on `lm_head` is refused in both:
it breaks TRL's fused LM head.
"""
from __future__ import annotations

import logging
from pathlib import Path

from evalsuite.errors import UserError

log = logging.getLogger(__name__)

# Module names the older name-based rules used; kept for tests that check where LoRA did NOT land.
VISION_PARTS = ("vision_tower", "vision_model", "visual", "image_encoder")
PROJECTOR_PARTS = ("multi_modal_projector", "mm_projector", "vision_resampler", "merger", "connector")


def torch_dtype(cfg):
    import torch

    return torch.bfloat16 if cfg.bf16 else torch.float16 if cfg.fp16 else torch.float32


def _quantization(cfg):
    if not cfg.q_lora:
        return None
    from transformers import BitsAndBytesConfig

    if cfg.bits == 4:
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                  bnb_4bit_compute_dtype=torch_dtype(cfg))
    return BitsAndBytesConfig(load_in_8bit=True)


def _check_checkpoint(path: Path) -> None:
    """Evaluation's checkpoint check (config.json, safetensors present and whole), before loading: a
    checkpoint with only pickle weights (pytorch_model.bin) is refused, never unpickled."""
    from evalsuite.models.vlm import _check_dir

    try:
        _check_dir(path)
    except UserError as e:
        raise UserError(f"model_name_or_path: {e}") from None


def _flash_attention_supported(path: Path, trust_remote_code: bool) -> bool:
    """Whether the checkpoint's model class has a flash-attention-2 path. One that has none loads with its
    default attention after one warning line, as VL-RLHF disables the flag for such architectures
    (docs/csr-fidelity.md); the machine itself (CUDA, flash-attn) was checked with the config."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    try:
        cls = AutoModelForImageTextToText._model_mapping[type(config)]
    except KeyError:  # not an image-text model: from_pretrained names the problem
        return True
    if getattr(cls, "_supports_flash_attn", False) or getattr(cls, "_supports_flash_attn_2", False):
        return True
    log.warning("use_flash_attention_2: %s has no flash attention 2; loading it with its default attention",
                cls.__name__)
    return False


def load_model_and_processor(cfg):
    """(model, processor) from cfg.model_name_or_path, local files only."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = Path(cfg.model_name_or_path)
    _check_checkpoint(path)
    kwargs = dict(local_files_only=True, trust_remote_code=cfg.trust_remote_code, dtype=torch_dtype(cfg),
                  use_safetensors=True)
    if cfg.use_flash_attention_2 and _flash_attention_supported(path, cfg.trust_remote_code):
        kwargs["attn_implementation"] = "flash_attention_2"
    quant = _quantization(cfg)
    if quant is not None:
        kwargs["quantization_config"] = quant
    try:
        processor = AutoProcessor.from_pretrained(path, local_files_only=True, trust_remote_code=cfg.trust_remote_code)
        model = AutoModelForImageTextToText.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as e:
        raise UserError(f"model_name_or_path: cannot load {str(path)!r} ({str(e).splitlines()[0]})") from None
    if quant is not None:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=bool(cfg.activation_checkpointing))
    cast_floating_inputs(model)
    if cfg.freeze_vision_tower:
        n = freeze_vision_tower(model)
        log.info("froze %d vision-tower parameters", n)
    return model, processor


def cast_floating_inputs(model) -> None:
    """Floating-point inputs (pixels, audio features) reach the model in its dtype, as evaluation and the CSR
    search pass them (`evalsuite.models.inputs.to_device`): a processor may return bfloat16 pixels for a
    float32 model, or float32 pixels for a bfloat16 one. A forward pre-hook, so every trainer's call is covered."""
    import torch

    dtype = model.dtype

    def hook(module, args, kwargs):
        for k, v in kwargs.items():
            if torch.is_tensor(v) and v.is_floating_point() and v.dtype != dtype:
                kwargs[k] = v.to(dtype)
        return args, kwargs

    model.register_forward_pre_hook(hook, with_kwargs=True)


def fused_head_fits(model) -> bool:
    """Whether TRL's fused LM head can run `model`: it calls `model.base_model` as a backbone and reads that
    output's `last_hidden_state`, so the model needs a backbone module apart from itself (LLaVA's `model`, ...).
    BLIP-2 / InstructBLIP have none (`base_model` is the model itself, whose output is logits): plain path."""
    from accelerate.utils import is_peft_model

    core = model.get_base_model() if is_peft_model(model) else model
    return core.base_model is not core


def _is_part(name: str, parts: tuple[str, ...]) -> bool:
    return any(p in name.split(".") for p in parts)


def freeze_vision_tower(model) -> int:
    """requires_grad=False on every parameter of the model's image (and audio) encoders, found through the
    model's own `get_encoder(modality=...)`; returns how many were frozen."""
    frozen = 0
    for modality in ("image", "audio"):
        encoder = model.get_encoder(modality=modality)
        if encoder is model or encoder is language_model(model):
            continue
        for param in encoder.parameters():
            if param.requires_grad:
                param.requires_grad_(False)
                frozen += param.numel()
    if not frozen:
        raise UserError(f"freeze_vision_tower: {type(model).__name__} exposes no image encoder "
                        "(get_encoder(modality='image')); set freeze_vision_tower: false")
    return frozen

def language_model(model):
    """The language-model submodule, found by structure: the model's own `get_decoder()` (LLaVA's
    `model.language_model`, Idefics2's `model.text_model`, BLIP-2's OPT), else its `language_model`."""
    dec = model.get_decoder() if callable(getattr(model, "get_decoder", None)) else None
    if dec is None or dec is model:
        dec = getattr(model, "language_model", None) or getattr(getattr(model, "model", None), "language_model", None)
    if dec is None:
        raise UserError(f"lora_target_modules: {type(model).__name__} exposes no language model "
                        "(get_decoder() / language_model)")
    return dec


def _is_linear(module) -> bool:
    import torch.nn as nn

    return isinstance(module, nn.Linear) or type(module).__name__ in ("Linear4bit", "Linear8bitLt")


# bitsandbytes' quantised linears: their own forward, a tensor in and a tensor out of the same shapes
_PLAIN_LINEAR_TYPES = ("Linear4bit", "Linear8bitLt")


def maps_tensor_to_tensor(module) -> bool:
    """Whether a Linear-like module's forward is a plain linear map (a tensor in, one tensor of
    `out_features` out): what LoRA's wrapper assumes. nn.Linear's own forward and the quantised linears are;
    a subclass with its own forward (a MoE router, e.g. Llama-4's `Llama4Router(nn.Linear)`, returns
    (scores, logits)) is probed once on a zero input and kept only when it maps a tensor to one tensor of
    the right shape. A module that cannot be probed (weights on the meta device or partitioned) is left out."""
    import torch
    import torch.nn as nn

    if type(module).forward is nn.Linear.forward or type(module).__name__ in _PLAIN_LINEAR_TYPES:
        return True
    weight = getattr(module, "weight", None)
    n_in, n_out = getattr(module, "in_features", None), getattr(module, "out_features", None)
    if not isinstance(weight, torch.Tensor) or weight.device.type == "meta" or weight.numel() == 0 \
            or not isinstance(n_in, int) or not isinstance(n_out, int):
        return False
    try:
        with torch.no_grad():
            out = module(torch.zeros(2, n_in, dtype=weight.dtype, device=weight.device))
    except Exception:  # a forward that needs more than one tensor is no plain linear map either
        return False
    return isinstance(out, torch.Tensor) and tuple(out.shape) == (2, n_out)


def language_model_linears(model) -> list[str]:
    """Full names of the nn.Linear (and quantised Linear) modules inside the language model (`language_model`),
    the output head excluded: never the vision tower, projector or Q-Former, whatever they are called."""
    return _inside_language_model(model, model_linears(model))


def _inside_language_model(model, names: list[str]) -> list[str]:
    lm = language_model(model)
    prefix = next(n for n, m in model.named_modules() if m is lm)
    return [n for n in names if not prefix or n.startswith(prefix + ".")]


def model_linears(model) -> list[str]:
    """Full names of every Linear of the whole model (vision tower and projector included) whose forward
    is a plain linear map (`maps_tensor_to_tensor`: MoE routers and other tuple-returning Linear subclasses
    are not), the output head excluded (TRL's fused LM head reads its weight)."""
    head = model.get_output_embeddings()
    return [name for name, module in model.named_modules()
            if name and _is_linear(module) and module is not head and name.split(".")[-1] != "lm_head"
            and maps_tensor_to_tensor(module)]


def _not_plain_linears(model) -> list[str]:
    """Names of the Linear modules `model_linears` leaves out because their forward is no plain linear map."""
    return [name for name, module in model.named_modules()
            if name and _is_linear(module) and not maps_tensor_to_tensor(module)]


def _suffix_hits(name: str, candidates: list[str]) -> list[str]:
    # peft's own rule for a list of target names: the full name equals it or ends with "." + it
    return [c for c in candidates if c == name or c.endswith("." + name)]


def lora_targets(model, spec: str, scope: str) -> list[str]:
    """Full names of the modules that take LoRA (see `lora_scope` in training/config.py).

    released (VL-RLHF's `default_lora_target` for LLaVA, CSR's `find_all_linear_names`; docs/csr-fidelity.md):
    `auto` is the set of last name parts of the language model's Linear layers (q_proj, ..., down_proj for
    LLaVA), and every name, auto's or listed, is matched as peft matches a list of names, across the whole
    model: on LLaVA, CLIP's q_proj/k_proj/v_proj take LoRA too; the projector (linear_1/2) does not.
    language_model: `auto` = every Linear of the language model; a listed name is matched inside the language
    model only, and the matches it has outside are left out with a warning naming how many."""
    everywhere = model_linears(model)  # probes each Linear subclass once (maps_tensor_to_tensor)
    lm_linears = _inside_language_model(model, everywhere)
    if not lm_linears:
        raise UserError("lora_target_modules: found no Linear layers in the language model")
    if spec.strip() == "auto":
        if scope == "language_model":
            return lm_linears
        wanted = sorted({n.split(".")[-1] for n in lm_linears})
    else:
        wanted = [s.strip() for s in spec.split(",") if s.strip()]
    if "lm_head" in wanted:
        raise UserError("lora_target_modules: lm_head cannot take LoRA (TRL's fused LM head reads its weight)")
    chosen: list[str] = []
    for w in wanted:
        hits = _suffix_hits(w, everywhere)
        if scope == "language_model":
            inside = _suffix_hits(w, lm_linears)
            if not inside:
                raise UserError(f"lora_target_modules: {w!r} matches no Linear layer of the language model"
                                + (f" ({len(hits)} outside it: lora_scope released adapts those)" if hits
                                   else _left_out(model, w)))
            if len(hits) > len(inside):
                log.warning("lora_target_modules: %r also matches %d Linear layers outside the language model "
                            "(e.g. %s); left out by lora_scope language_model", w, len(hits) - len(inside),
                            next(h for h in hits if h not in inside))
            hits = inside
        elif not hits:
            raise UserError(f"lora_target_modules: {w!r} matches no Linear layer of the model"
                            + _left_out(model, w))
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


def _left_out(model, wanted: str) -> str:
    """Why `wanted` matched nothing when what it names are Linear subclasses that are no plain linear map."""
    skipped = _suffix_hits(wanted, _not_plain_linears(model))
    if not skipped:
        return ""
    module = model.get_submodule(skipped[0])
    return (f" (its {len(skipped)} matches, e.g. {skipped[0]} ({type(module).__name__}), are Linear subclasses "
            "whose forward does not return one tensor, such as MoE routers: LoRA cannot wrap them)")


def lora_config(cfg, model):
    """A peft LoraConfig from the cfg's lora_* fields, or None without --use_lora."""
    if not cfg.use_lora:
        return None
    from peft import LoraConfig

    targets = lora_targets(model, cfg.lora_target_modules, cfg.lora_scope)
    extra = [m.strip() for m in cfg.modules_to_save.split(",") if m.strip()] or None
    outside = len(set(targets) - set(_inside_language_model(model, targets)))
    log.info("LoRA r=%d alpha=%d on %d modules (%d outside the language model; lora_scope %s)",
             cfg.lora_r, cfg.lora_alpha, len(targets), outside, cfg.lora_scope)
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, bias=cfg.lora_bias,
                      target_modules=targets, modules_to_save=extra, task_type="CAUSAL_LM")


def setup_reporting(cfg) -> None:
    """Environment for the trackers HF Trainer starts (wandb works offline by default)."""
    import os

    from training.config_checks import report_targets

    targets = report_targets(cfg)
    if "wandb" in targets:
        os.environ.setdefault("WANDB_MODE", cfg.wandb_mode)
        os.environ.setdefault("WANDB_DIR", str(cfg.output_dir))
        if cfg.project_name:
            os.environ["WANDB_PROJECT"] = cfg.project_name
        if cfg.group_name:
            os.environ["WANDB_RUN_GROUP"] = cfg.group_name
