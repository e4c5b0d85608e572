"""Everything about an `evalsuite run` that can fail and needs no model, checked before the output
directory is claimed (so a refused run leaves no `run.json` or `.lock` behind):

- every text setting (label, prompts, paths) is valid UTF-8: argv bytes that are not arrive as lone
  surrogates, which the tokenizer and the store's Parquet writer refuse only after generation;
- the checkpoint: config.json, every safetensors header, a vision-language config with a model class
  (`evalsuite.models.vlm.check_checkpoint`);
- the disks that will hold the output directory and the store have room for the run's first files.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from evalsuite.errors import UserError

MIN_FREE_BYTES = 1 << 20   # run.json, the lock, the first result files: far less than 1 MiB


def check_text(value: Any, key: str = "") -> None:
    """One UserError naming the first string in `value` (a plain config) that is not valid UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            bad = value[e.start]
            byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"{bad!r}"
            name = f"--{key.replace('_', '-')}" if key and "." not in key else (key or "argument")
            raise UserError(f"{name}: not valid UTF-8 text ({byte} at character {e.start}); pass UTF-8 text")
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, (list, tuple)):
        for v in value:
            check_text(v, key)


def _existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_free_space(path: str | Path, flag: str, need: int = MIN_FREE_BYTES) -> None:
    """One UserError when the file system that will hold `path` has less than `need` bytes free."""
    try:
        free = shutil.disk_usage(_existing(Path(path))).free
    except OSError:
        return   # not measurable here: the write itself will say
    if free < need:
        raise UserError(f"{flag} {path}: no space left on the device ({free} bytes free); free some space "
                        "or pass another directory")


def check_before_claim(cfg) -> None:
    """The checks of `evalsuite run` that need no model, in the order a user fixes them."""
    from evalsuite.config import to_plain
    from evalsuite.models.vlm import check_checkpoint

    check_text(to_plain(cfg))
    check_checkpoint(Path(cfg.ckpt), cfg.trust_remote_code)
    check_free_space(cfg.store, "--store")
    if cfg.output:
        check_free_space(cfg.output, "--output")
