"""Turn a trained (LoRA or full) model into a full checkpoint directory `evalsuite run` loads directly.

Layout: safetensors weights + config + processor files + `evalsuite.json` (the manifest, naming the
parent checkpoint, the method, the iteration, the resolved config and the data hash). The directory is
written under a temporary name and renamed into place, so a crash never leaves a half checkpoint.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def merged_model(model):
    """The model with any LoRA adapter merged in (a plain transformers model)."""
    from peft import PeftModel

    if isinstance(model, PeftModel):
        return model.merge_and_unload()
    return model


def save_checkpoint(model, processor, out_dir: str | Path, *, iteration: int, parent: str | None, method: str,
                    config: dict, data_hash: str | None, extra: dict[str, Any] | None = None) -> Path:
    """Merge, save weights + processor, write the manifest; replaces `out_dir` atomically."""
    from evalsuite.manifest import write_manifest

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        full = merged_model(model)
        # TRL patches forward() for its fused LM head; the weights and config are untouched by it.
        full.save_pretrained(tmp, safe_serialization=True)
        processor.save_pretrained(tmp)
        write_manifest(tmp, iteration=iteration, parent=parent, method=method, config=config,
                       data_hash=data_hash, extra=extra)
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
