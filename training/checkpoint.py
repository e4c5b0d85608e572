"""Turn a trained (LoRA or full) model into a full checkpoint directory `evalsuite run` loads directly.

Layout: safetensors weights + config + processor files + `evalsuite.json` (the manifest, naming the
parent checkpoint, the method, the iteration, the resolved config and the data hash). The directory is
written under a temporary name and renamed into place, so a crash never leaves a half checkpoint.

A LoRA adapter is merged in float32 into the base weights re-read from the base checkpoint (not into
the training copy, which may have been cast to bf16), and the result is saved in the base
checkpoint's own dtype (`merge_dtype: auto`; fp16 for llava-1.5-hf). At CSR's learning rate the
adapter's delta is far below bf16's resolution: merged into bf16 most of it rounds away
(docs/csr-fidelity.md, "Merge precision"). The manifest records how much of the delta survived.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DTYPES = ("auto", "float32", "float16", "bfloat16")
KEPT_WARNING = 0.9  # warn when less of the LoRA delta than this survives the cast to the saved dtype


def checkpoint_dtype(path: str | Path) -> str:
    """The dtype a checkpoint's weights are stored in: config.json's (torch_)dtype, else the first
    safetensors tensor's, else float32."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    for key in ("dtype", "torch_dtype"):
        if isinstance(config.get(key), str) and config[key] in DTYPES[1:]:
            return config[key]
    files = sorted(path.glob("*.safetensors"))
    if files:
        from safetensors import safe_open

        names = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
        with safe_open(str(files[0]), framework="pt") as fh:
            keys = list(fh.keys())
            if keys:
                return names.get(fh.get_slice(keys[0]).get_dtype(), "float32")
    return "float32"


def _is_peft(model) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def drop_lora_outside_language_model(peft) -> list[str]:
    """Replace every LoRA layer of `peft` outside the language model by its base layer (`lora_merge:
    language_model`); returns their names. CSR's merge does this implicitly: LLaVA's loader builds the
    model with the vision tower not yet loaded, so the adapter's CLIP weights find no module and are
    skipped, and CLIP is then loaded as it was (docs/csr-fidelity.md, "LoRA targets")."""
    from peft.tuners.lora import LoraLayer

    from training.trainers.model import language_model

    core = peft.get_base_model()
    inside = {id(m) for m in language_model(core).modules()}  # by structure, as lora_scope finds the LM
    prefix = next(n for n, m in peft.named_modules() if m is core)
    dropped = []
    for name, module in list(peft.named_modules()):
        if isinstance(module, LoraLayer) and id(module) not in inside:
            parent, _, child = name.rpartition(".")
            setattr(peft.get_submodule(parent), child, module.get_base_layer())
            dropped.append(name[len(prefix) + 1:] if prefix and name.startswith(prefix + ".") else name)
    if dropped:
        log.info("merge: %d LoRA layers outside the language model dropped, not merged (lora_merge "
                 "language_model), e.g. %s", len(dropped), dropped[0])
    return dropped


def merge_lora_fp32(model, base: str | Path, save_dtype: str, trust_remote_code: bool = False,
                    lora_merge: str = "all"):
    """(full model in `save_dtype`, stats): the trained adapter of `model` (a PeftModel) merged in
    float32 into the weights of `base`. stats: rms of the LoRA delta, rms of (saved - base) over the
    same weights, and `delta_kept` = <saved - base, delta> / <delta, delta> (1 = all of it survived).
    lora_merge: all = every LoRA layer; language_model = only those inside the language model (the others
    are dropped, counted in stats `lora_dropped_layers`)."""
    import torch
    from peft import get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
    from peft.tuners.lora import LoraLayer

    adapter = model.active_adapter
    state = {k: v.detach().float().cpu() for k, v in get_peft_model_state_dict(model, adapter_name=adapter).items()}
    cls = type(model.get_base_model())
    base32 = cls.from_pretrained(base, dtype=torch.float32, local_files_only=True, use_safetensors=True,
                                trust_remote_code=trust_remote_code)
    peft32 = get_peft_model(base32, model.peft_config[adapter], adapter_name=adapter)
    set_peft_model_state_dict(peft32, state, adapter_name=adapter)
    dropped = drop_lora_outside_language_model(peft32) if lora_merge == "language_model" else []
    target = getattr(torch, save_dtype)
    sums = torch.zeros(3, dtype=torch.float64)  # sum delta^2, sum diff^2, sum diff * delta
    count = 0
    with torch.no_grad():
        for module in peft32.modules():
            if isinstance(module, LoraLayer) and adapter in module.lora_A:
                w = module.get_base_layer().weight
                delta = module.get_delta_weight(adapter).float()
                diff = (w + delta).to(target).float() - w
                sums += torch.stack([(delta * delta).sum(), (diff * diff).sum(), (diff * delta).sum()]).double()
                count += w.numel()
        full = peft32.merge_and_unload().to(target)
    n = max(count, 1)
    stats = {"dtype": save_dtype, "lora_weights": count, "rms_lora_delta": float((sums[0] / n).sqrt()),
             "rms_merged_minus_base": float((sums[1] / n).sqrt()),
             "delta_kept": float(sums[2] / sums[0]) if sums[0] > 0 else None, "lora_dropped_layers": len(dropped)}
    if stats["delta_kept"] is not None and stats["delta_kept"] < KEPT_WARNING:
        log.warning("merge: only %.0f%% of the LoRA delta (rms %.3g) survived saving in %s; "
                    "set merge_dtype: float32 to keep it", 100 * stats["delta_kept"], stats["rms_lora_delta"], save_dtype)
    return full, stats


def merged_model(model, base: str | Path | None = None, merge_dtype: str = "auto", trust_remote_code: bool = False,
                 lora_merge: str = "all"):
    """(plain transformers model, merge stats or None). A LoRA model with a known `base` is merged in
    float32 (`merge_lora_fp32`) and cast to `merge_dtype` (auto = the base checkpoint's dtype); a
    full model is saved as trained unless `merge_dtype` names a dtype. lora_merge: see merge_lora_fp32."""
    if _is_peft(model) and base is not None:
        dtype = checkpoint_dtype(base) if merge_dtype == "auto" else merge_dtype
        return merge_lora_fp32(model, base, dtype, trust_remote_code, lora_merge)
    if _is_peft(model):
        if lora_merge == "language_model":
            drop_lora_outside_language_model(model)
        model = model.merge_and_unload()
    if merge_dtype != "auto":
        import torch

        model = model.to(getattr(torch, merge_dtype))
    return model, None


def save_checkpoint(model, processor, out_dir: str | Path, *, iteration: int, parent: str | None, method: str,
                    config: dict, data_hash: str | None, extra: dict[str, Any] | None = None,
                    base: str | Path | None = None, merge_dtype: str = "auto",
                    trust_remote_code: bool = False, lora_merge: str = "all") -> Path:
    """Merge, save weights + processor, write the manifest; replaces `out_dir` atomically.

    `base`: the checkpoint the model was trained from (its weights are re-read for the merge)."""
    from evalsuite.manifest import write_manifest

    from training.outdir import apply_umask, check_merged_dir

    out = Path(out_dir)
    check_merged_dir(out)   # never replace a folder evalsuite did not write
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        full, stats = merged_model(model, base, merge_dtype, trust_remote_code, lora_merge)
        # TRL patches forward() for its fused LM head; the weights and config are untouched by it.
        full.save_pretrained(tmp, safe_serialization=True)
        processor.save_pretrained(tmp)
        extra = {**(extra or {}), **({"merge": stats} if stats else {})}
        write_manifest(tmp, iteration=iteration, parent=parent, method=method, config=config,
                       data_hash=data_hash, extra=extra)
        apply_umask(tmp)   # mkdtemp made it 0700: give it the modes every other output of the run has
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("checkpoint (%s, iteration %s, parent %s) -> %s", method, iteration, parent, out)
    return out
