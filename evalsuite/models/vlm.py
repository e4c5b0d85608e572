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
from evalsuite.gen_settings import GenConfig
from evalsuite.models.inputs import InputConfig
from evalsuite.types import GenRequest

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
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

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
    inputs: InputConfig | None = None, weights: bool = True,
) -> VLM:
    """Load model + processor from `path`; raise UserError for a dir that is not a local VLM, or whose
    processor has no prompt format for `inputs` (no chat template and none given, ...).

    weights=False: the model class built on torch's meta device (configs, generation config, module
    structure; no weight memory): for a caller whose forwards run elsewhere (CSR trees on a vLLM worker)."""
    import torch
    from transformers import AutoModelForImageTextToText

    path = Path(path)
    config = check_checkpoint(path, trust_remote_code)
    model_inputs = load_inputs(path, inputs, trust_remote_code)  # a missing prompt format fails before the weights
    device = _pick_device(device)
    torch_dtype = getattr(torch, resolve_dtype(device, dtype))
    if not weights:
        from transformers import GenerationConfig

        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(config, trust_remote_code=trust_remote_code,
                                                            dtype=torch_dtype)
        try:
            model.generation_config = GenerationConfig.from_pretrained(path, local_files_only=True)
        except OSError:  # no generation_config.json: the one from_pretrained would derive
            model.generation_config = GenerationConfig.from_model_config(config)
        return VLM(model=model.eval(), processor=model_inputs.processor, path=path, device=device, inputs=model_inputs)
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


def placeholder_token_ids(processor, config) -> list[int]:
    """The image / video placeholder tokens of a checkpoint (its processor and model config): text that
    holds one cannot be fed back to the model (its count must equal the features'), so a context that is
    re-encoded (the CSR tree) never contains one."""
    ids = {getattr(config, "image_token_id", None), getattr(config, "image_token_index", None),
           getattr(config, "video_token_id", None), getattr(processor, "image_token_id", None),
           getattr(processor, "video_token_id", None)}
    return sorted(i for i in ids if isinstance(i, int))


def suppressed_token_ids(processor, config, generation_config=None) -> list[int]:
    """Tokens a generated answer must never contain: the image placeholder, pad and bos (never an EOS).
    Needs only the checkpoint's processor and configs, so an engine without the HF weights asks the same."""
    tok = getattr(processor, "tokenizer", processor)
    ids = set(placeholder_token_ids(processor, config)) | {tok.pad_token_id, tok.bos_token_id}
    eos = getattr(generation_config, "eos_token_id", None)
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos]) | {tok.eos_token_id}
    return sorted(i for i in ids if i is not None and i not in eos)


# the keys vLLM reads a text model's context from (the smallest present wins): the one limit both engines
# stop at (vllm/transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key)
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


def context_limit(config) -> int | None:
    """Tokens per sequence (prompt, image tokens and answer) the model is made for: a config.json dict or a
    transformers config; None when it names none."""
    if isinstance(config, dict):
        text = config.get("text_config") or config
        values = [text.get(k) for k in CONTEXT_KEYS]
    else:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        values = [getattr(text, k, None) for k in CONTEXT_KEYS]
    values = [int(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    return min(values) if values else None


def context_stop(attention_mask, limit: int | None):
    """A transformers StoppingCriteria that ends each row once its prompt (unpadded) plus answer reaches
    `limit` tokens: where vLLM's max_model_len ends it (finish "length"), so both engines stop at one place.
    None when the model names no context."""
    if limit is None or attention_mask is None:
        return None
    from transformers import StoppingCriteria

    lengths = attention_mask.sum(dim=1)
    width = attention_mask.shape[1]

    class ContextStop(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return (lengths.to(input_ids.device) + (input_ids.shape[1] - width)) >= limit

    return ContextStop()


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
    banned = suppressed_token_ids(vlm.processor, vlm.model.config, vlm.model.generation_config)
    suppress = {"suppress_tokens": banned} if gen.suppress_special_tokens else {}
    limit = context_limit(vlm.model.config)
    for batch in progress_bar(batches, desc="generate", unit="batch", disable=not progress or len(batches) < 2):
        inputs = encode_batch(vlm, batch)
        stop = context_stop(inputs.get("attention_mask"), limit)
        with torch.inference_mode():
            out = vlm.model.generate(
                **inputs, **gen.as_kwargs(), **suppress, pad_token_id=vlm.tokenizer.pad_token_id,
                **({"stopping_criteria": [stop]} if stop is not None else {}),
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
