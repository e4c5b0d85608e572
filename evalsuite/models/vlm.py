"""Load any local HF vision-language checkpoint directory and answer (image, prompt) requests.

Loading is `from_pretrained` on a local directory only (no hub), safetensors only, and
`trust_remote_code` off unless the caller asks. Every way a directory can be wrong is reported as a
one-line `UserError` naming the path.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsuite.errors import UserError
from evalsuite.models.inputs import InputConfig
from evalsuite.types import GenConfig, GenRequest

log = logging.getLogger(__name__)


@dataclass
class VLM:
    model: Any
    processor: Any
    path: Path
    device: str
    inputs: Any = None  # evalsuite.models.inputs.ModelInputs: prompt format, images, encoding

    @property
    def tokenizer(self):
        return self.processor.tokenizer


def _check_dir(path: Path) -> dict:
    if not path.exists():
        raise UserError(f"{path}: checkpoint directory does not exist")
    if not path.is_dir():
        raise UserError(f"{path}: not a directory (a checkpoint is a directory with config.json + weights)")
    cfg_path = path / "config.json"
    if not cfg_path.exists():
        raise UserError(f"{path}: no config.json (not a Hugging Face checkpoint directory)")
    from evalsuite.safeio import read_json_object

    config = read_json_object(cfg_path)   # non-UTF-8, a list, too deep: one line naming the file
    refuse_encoder_decoder(path, config)
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        if any(path.glob("*.bin")) or any(path.glob("*.pt")):
            raise UserError(f"{path}: only pickle weights (*.bin/*.pt) found; evalsuite loads safetensors only "
                            "(convert with `save_pretrained(..., safe_serialization=True)`)")
        raise UserError(f"{path}: no *.safetensors weight files")
    for shard in shards:
        _check_safetensors(shard)
    return config


def refuse_encoder_decoder(path: Path, config: dict) -> None:
    """One line for an encoder-decoder checkpoint (Florence-2), before any loading: generation, the collators
    and the CSR search here are decoder-only (answers are what follows the prompt in one sequence), so an
    encoder-decoder's answers would all be empty and its training labels wrong."""
    parts = [config, *(v for v in config.values() if isinstance(v, dict))]
    if any(part.get("is_encoder_decoder") for part in parts):
        raise UserError(f"{path}: model_type {config.get('model_type')!r} is an encoder-decoder "
                        "(config.is_encoder_decoder); evalsuite evaluates and trains decoder-only VLMs only")


def _check_safetensors(path: Path) -> None:
    """The whole header validated against the file (evalsuite/safeio.py) before any library reads it."""
    from evalsuite.safeio import check_safetensors

    check_safetensors(path)


def check_checkpoint(path: Path, trust_remote_code: bool = False):
    """The checkpoint's transformers config, after every check that needs no weights: the directory,
    config.json, each safetensors header, a vision config and an image-text-to-text model class."""
    from transformers import AutoConfig

    _check_dir(path)
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    except (ValueError, OSError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: cannot read config ({(str(exc).splitlines() or [type(exc).__name__])[0]})") from None
    refuse_encoder_decoder(path, {"model_type": config.model_type, "is_encoder_decoder": config.is_encoder_decoder,
                                  "text_config": {"is_encoder_decoder": getattr(getattr(config, "text_config", None),
                                                                                "is_encoder_decoder", False)}})
    if getattr(config, "vision_config", None) is None:
        raise UserError(f"{path}: model_type {config.model_type!r} is not a vision-language model "
                        "(no vision_config)")
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if config.model_type not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES and not trust_remote_code:
        raise UserError(f"{path}: not a loadable vision-language checkpoint (model_type {config.model_type!r} "
                        "has no image-text-to-text model class in transformers)")
    return config


def resolve_dtype(device: str, dtype: str | None) -> str:
    """The torch dtype name a model is loaded in: `dtype`, else bfloat16 on a GPU and float32 elsewhere."""
    return dtype or ("bfloat16" if device.startswith("cuda") else "float32")


def _pick_device(device: str | None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_vlm(
    path: str | Path, trust_remote_code: bool = False, device: str | None = None, dtype: str | None = None,
    inputs: InputConfig | None = None,
) -> VLM:
    """Load model + processor from `path`; raise UserError for a dir that is not a local VLM, or whose
    processor has no prompt format for `inputs` (no chat template and none given, ...)."""
    import torch
    from transformers import AutoModelForImageTextToText

    path = Path(path)
    config = check_checkpoint(path, trust_remote_code)
    model_inputs = load_inputs(path, inputs, trust_remote_code)  # a missing prompt format fails before the weights
    device = _pick_device(device)
    torch_dtype = getattr(torch, resolve_dtype(device, dtype))
    try:
        model = AutoModelForImageTextToText.from_pretrained(
            path, local_files_only=True, trust_remote_code=trust_remote_code, use_safetensors=True, dtype=torch_dtype,
        )
    except ValueError as exc:
        raise UserError(f"{path}: not a loadable vision-language checkpoint ({str(exc).splitlines()[0]})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot load ({str(exc).splitlines()[0]})") from None
    model.to(device).eval()
    log.info("loaded %s (%s, %d params) on %s", path, config.model_type, model.num_parameters(), device)
    return VLM(model=model, processor=model_inputs.processor, path=path, device=device, inputs=model_inputs)


def load_inputs(path: str | Path, inputs: InputConfig | None = None, trust_remote_code: bool = False):
    """The checkpoint's processor bound to the prompt settings (`ModelInputs`), without the weights: what
    renders and records prompts, and refuses a checkpoint with no prompt format, before any generation."""
    from transformers import AutoProcessor

    from evalsuite.models.inputs import ModelInputs

    try:
        processor = AutoProcessor.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    except ValueError as exc:
        raise UserError(f"{path}: not a loadable vision-language processor ({str(exc).splitlines()[0]})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot load the processor ({str(exc).splitlines()[0]})") from None
    return ModelInputs(processor, inputs, where=str(path))


def load_image(image: Any):
    """A PIL RGB image from a path or a PIL image; unreadable files are a UserError naming the path."""
    from evalsuite.images import open_rgb

    return open_rgb(image)


def build_prompt(vlm: VLM, question: str, with_image: bool = True) -> str:
    """The prompt text sent for one image + question (`evalsuite.models.inputs.ModelInputs.prompt`)."""
    return vlm.inputs.prompt(question, with_image)


def placeholder_token_ids(vlm: VLM) -> list[int]:
    """The image / video placeholder tokens: text that holds one cannot be fed back to the model (its
    count must equal the features'), so a context that is re-encoded (the CSR tree) never contains one."""
    cfg, proc = vlm.model.config, vlm.processor
    ids = {getattr(cfg, "image_token_id", None), getattr(cfg, "image_token_index", None),
           getattr(cfg, "video_token_id", None), getattr(proc, "image_token_id", None),
           getattr(proc, "video_token_id", None)}
    return sorted(i for i in ids if isinstance(i, int))


def suppressed_token_ids(vlm: VLM) -> list[int]:
    """Tokens a generated answer must never contain: the image placeholder, pad and bos (never an EOS)."""
    tok = vlm.tokenizer
    ids = set(placeholder_token_ids(vlm)) | {tok.pad_token_id, tok.bos_token_id}
    eos = getattr(vlm.model.generation_config, "eos_token_id", None)
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos]) | {tok.eos_token_id}
    return sorted(i for i in ids if i is not None and i not in eos)


def encode_batch(vlm: VLM, requests: list[GenRequest]):
    """The processor's full output for a batch of requests (all with an image, or none), left-padded."""
    with_image = requests[0].image is not None
    images = [load_image(r.image) for r in requests] if with_image else None
    prompts = [build_prompt(vlm, r.prompt, with_image) for r in requests]
    from evalsuite.models.inputs import to_device

    # floating inputs (pixels, audio features) in the model's dtype: a processor may return bfloat16 pixels
    return to_device(vlm.inputs.encode(prompts, images, padding_side="left"), vlm.device, vlm.model.dtype)


def generate(vlm: VLM, requests: list[GenRequest], gen: GenConfig, batch_size: int = 8, progress: bool = True) -> list[str]:
    """Answers to `requests`, in order, generated in batches through `vlm.inputs` (chat template or
    family format, system prompt, image_aspect; every processor tensor reaches `generate`)."""
    import torch

    from evalsuite.progress import progress_bar

    torch.manual_seed(gen.seed)
    answers: list[str] = []
    batches = [b for start in range(0, len(requests), batch_size)
               for b in _same_modality(requests[start:start + batch_size])]
    suppress = {"suppress_tokens": suppressed_token_ids(vlm)} if gen.suppress_special_tokens else {}
    for batch in progress_bar(batches, desc="generate", unit="batch", disable=not progress or len(batches) < 2):
        inputs = encode_batch(vlm, batch)
        with torch.inference_mode():
            out = vlm.model.generate(
                **inputs, **gen.as_kwargs(), **suppress, pad_token_id=vlm.tokenizer.pad_token_id,
            )
        new = out[:, inputs["input_ids"].shape[1]:]
        answers.extend(t.strip() for t in vlm.tokenizer.batch_decode(new, skip_special_tokens=True))
    return answers


def _same_modality(batch: list[GenRequest]) -> list[list[GenRequest]]:
    """`batch` split into runs of requests that all have an image or all have none (order kept)."""
    runs: list[list[GenRequest]] = []
    for r in batch:
        if runs and (runs[-1][0].image is None) == (r.image is None):
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs
