"""The one module that imports lmms_eval (lazily): evalsuite's VLM as an lmms-eval model, and the evaluator.

    from evalsuite.adapters import lmms_eval as lmms
    lm = lmms.make_model(lmms.VLMBackend.from_checkpoint("ckpt/"), cache_root="out/.resume/lmms")
    raw = lmms.evaluate_task(lm, {"task": "evalsuite_mme", "dataset_path": "parquet", ...})

Also the `lmms_eval.models` entry point (`manifests`), so `lmms-eval --model evalsuite --model_args
pretrained=DIR` works once evalsuite is pip-installed.

Importing this module is free: lmms_eval (~15 s, ~0.9 GB) is imported on first use, after the
offline environment is set (lmms_eval and huggingface_hub read it at import time).
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from evalsuite.types import GenConfig, GenRequest

log = logging.getLogger(__name__)

YAML_DIR = Path(__file__).resolve().parent.parent / "tasks" / "yaml"
MODEL_ID = "evalsuite"
OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def prepare_env() -> None:
    """Offline flags, and a writable request-cache dir (else lmms-eval writes into site-packages)."""
    global _PIL_GUARDS
    for key in OFFLINE_ENV:
        os.environ.setdefault(key, "1")
    os.environ.setdefault("LM_HARNESS_CACHE_PATH", str(Path(tempfile.gettempdir()) / "evalsuite-lmms-cache"))
    if _PIL_GUARDS is None:  # before any lmms_eval import
        from PIL import Image, ImageFile

        _PIL_GUARDS = (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES)


_PIL_GUARDS: tuple | None = None


def _restore_pil_guards() -> None:
    """lmms_eval.api.task sets PIL's LOAD_TRUNCATED_IMAGES and some task modules raise the decompression
    bomb limit to 1e9 px at import; put back what evalsuite.images.open_rgb relies on for the rest of
    the process (a truncated or bomb image must stay a one-line error, not load silently)."""
    if _PIL_GUARDS is not None:
        from PIL import Image, ImageFile

        Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = _PIL_GUARDS


def _forward_loguru(message) -> None:
    record = message.record
    logging.getLogger(record["name"] or "lmms_eval").log(
        max(record["level"].no, logging.DEBUG), record["message"],
    )


def _route_loguru() -> None:
    """lmms_eval.models replaces all loguru sinks with a stdout one (G13): send its logs to `logging`.
    Called after every step that may import lmms_eval modules, so it also undoes their PIL settings."""
    from loguru import logger

    _restore_pil_guards()
    logger.remove()
    logger.add(_forward_loguru, level="INFO", format="{message}")


_EVALUATOR = None


def import_evaluator():
    """`lmms_eval.evaluator`, imported once per process with the offline env and the filelock guard."""
    global _EVALUATOR
    if _EVALUATOR is None:
        prepare_env()
        import lmms_eval.models  # noqa: F401  (its import-time logger reset must happen before ours)
        from lmms_eval import evaluator

        try:
            import filelock._api  # noqa: F401
        except ModuleNotFoundError:  # filelock>=4 lacks the module simple_evaluate patches (G1)
            evaluator._enable_reentrant_filelocks._patched = True
        _route_loguru()
        _EVALUATOR = evaluator
    return _EVALUATOR


_TASK_MANAGERS: dict[bool, object] = {}


def task_manager(include_defaults: bool = False):
    """TaskManager over evalsuite's yamls; with `include_defaults` also lmms-eval's ~2000 (~10 s, cached)."""
    if include_defaults not in _TASK_MANAGERS:
        import_evaluator()
        from lmms_eval.tasks import TaskManager

        _TASK_MANAGERS[include_defaults] = TaskManager(
            "WARNING", include_path=str(YAML_DIR), include_defaults=include_defaults,
        )
    return _TASK_MANAGERS[include_defaults]


def leaf_task_configs(tm, name: str) -> dict[str, dict] | None:
    """{leaf task: its yaml config (functions not imported)} for a task/group/tag, None if unknown."""
    from lmms_eval.utils import load_yaml_config

    entry = tm.task_index.get(name)
    if entry is None:
        return None
    if entry["type"] in ("task", "python_task"):
        return {name: load_yaml_config(entry["yaml_path"], mode="simple")}
    subtasks = entry.get("task")
    if entry["type"] == "group" and entry.get("yaml_path", -1) != -1:
        subtasks = load_yaml_config(entry["yaml_path"], mode="simple").get("task", [])
    leaves: dict[str, dict] = {}
    for sub in subtasks if isinstance(subtasks, list) else []:
        found = leaf_task_configs(tm, sub) if isinstance(sub, str) else None
        leaves.update(found or {})
    return leaves


def evaluate_task(lm, task, *, limit=None, gen_kwargs: str | None = None, bootstrap_iters: int = 100,
                  include_defaults: bool = False) -> dict | None:
    """One `simple_evaluate` call on one task (a name or a dict override); None on ranks != 0."""
    import torch

    evaluator = import_evaluator()
    lm.task_dict = {}  # datasets of the previous task are not needed any more
    backend = "torchrun" if torch.distributed.is_available() and torch.distributed.is_initialized() else "accelerate"
    try:
        results = evaluator.simple_evaluate(
            model=lm, model_args=f"pretrained={lm.backend.name}", tasks=[task], limit=limit,
            batch_size=lm.batch_size, log_samples=True, bootstrap_iters=bootstrap_iters,
            gen_kwargs=gen_kwargs or None, task_manager=task_manager(include_defaults),
            verbosity="WARNING", distributed_executor_backend=backend, datetime_str=_utc_stamp(),
        )
    except Exception as exc:  # process_results is retried 5x (G12): surface the real cause
        raise unwrap_error(exc) from exc
    finally:
        _route_loguru()  # lazily imported lmms_eval modules may have reset loguru (and PIL) again
    return results


def unwrap_error(exc: BaseException) -> BaseException:
    """The exception inside tenacity's RetryError (lmms-eval wraps process_results and downloads)."""
    last = getattr(exc, "last_attempt", None)
    if last is not None and callable(getattr(last, "exception", None)) and last.exception() is not None:
        return last.exception()
    return exc


def _utc_stamp() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


class VLMBackend:
    """Answers GenRequests with a loaded evalsuite VLM; `fingerprint` (the checkpoint hash) keys the cache."""

    def __init__(self, vlm, fingerprint: str, name: str | None = None):
        self.vlm = vlm
        self.fingerprint = fingerprint
        self.name = name or str(vlm.path)
        self.device = str(vlm.device)

    @classmethod
    def from_checkpoint(cls, path, device=None, dtype=None, trust_remote_code: bool = False) -> "VLMBackend":
        from evalsuite.manifest import checkpoint_hash
        from evalsuite.models.vlm import load_vlm

        vlm = load_vlm(path, trust_remote_code=trust_remote_code, device=device, dtype=dtype)
        return cls(vlm, checkpoint_hash(path), name=str(path))

    def generate(self, requests: list[GenRequest], gen: GenConfig) -> list[str]:
        from evalsuite.models.vlm import generate

        return generate(self.vlm, requests, gen, batch_size=max(1, len(requests)), progress=False)

    def prompt_text(self, context: str, with_image: bool = True) -> str:
        """The text the processor receives for `context` (chat template, system prompt, family format)."""
        from evalsuite.models.vlm import build_prompt

        return build_prompt(self.vlm, context, with_image)

    def loglikelihood(self, pairs: list[tuple[GenRequest, str]]) -> list[tuple[float, bool]]:
        from evalsuite.models import vlm as vlm_mod

        if hasattr(vlm_mod, "loglikelihood"):
            return vlm_mod.loglikelihood(self.vlm, pairs)
        from evalsuite.adapters.vlm_loglik import loglikelihood

        return loglikelihood(self.vlm, pairs)


def make_model(backend, batch_size: int = 8, cache_root: str | os.PathLike | None = None):
    """An lmms-eval model instance answering with `backend` (and resuming from `cache_root`)."""
    cls = __getattr__("EvalsuiteLMM")
    return cls(backend=backend, batch_size=batch_size, cache_dir=cache_root)


def manifests():
    """Entry point `lmms_eval.models`: `--model evalsuite` resolves to EvalsuiteLMM."""
    from lmms_eval.models.registry_v2 import ModelManifest

    return [ModelManifest(model_id=MODEL_ID, simple_class_path=f"{__name__}.EvalsuiteLMM")]


def __getattr__(name: str):
    # The lmms subclass needs lmms_eval.api.model (torch + transformers, ~6 s): build it on first access
    # (lmms-eval's registry does getattr(module, "EvalsuiteLMM"), which lands here).
    if name == "EvalsuiteLMM":
        prepare_env()
        from lmms_eval.api.model import lmms

        from evalsuite.adapters.lmms_model import LMMCore

        cls = type("EvalsuiteLMM", (LMMCore, lmms), {
            "__module__": __name__, "__qualname__": "EvalsuiteLMM", "__doc__": LMMCore.__doc__,
        })
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
