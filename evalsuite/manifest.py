"""`evalsuite.json`: the manifest every checkpoint directory the project writes carries.

It says what the checkpoint is (iteration, parent, method), how it was made (resolved config, data
hash, code version) and what its weights are (sha256 per weight file), so a result row can name its
checkpoint by content and a reader can tell when weights were changed behind its back.
"""
from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
from pathlib import Path

from evalsuite.errors import UserError
from evalsuite.files import sha256_file, write_json_atomic

MANIFEST = "evalsuite.json"
SCHEMA = 1
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def weight_files(ckpt: str | Path) -> list[Path]:
    ckpt = Path(ckpt)
    return sorted(p for p in ckpt.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))


def write_manifest(
    ckpt: str | Path,
    *,
    iteration: int | None,
    parent: str | None,
    method: str,
    config: dict | None = None,
    data_hash: str | None = None,
    extra: dict | None = None,
) -> Path:
    """Hash the weight files now in `ckpt` and write the manifest (atomically) beside them."""
    from evalsuite.version import code_version

    ckpt = Path(ckpt)
    manifest = {
        "schema": SCHEMA,
        "iteration": iteration,
        "parent": _parent_ref(parent),
        "method": method,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "code_version": code_version(),
        "config": config or {},
        "data_hash": data_hash,
        "weights": {p.name: sha256_file(p) for p in weight_files(ckpt)},
        "extra": extra or {},
    }
    return write_json_atomic(ckpt / MANIFEST, manifest)


def _parent_ref(parent: str | Path | None) -> str | None:
    """A parent that is a local path is recorded absolute and resolved (a relative one would name a
    different folder from any other working directory); anything else (a hub id) is kept as given."""
    if parent is None:
        return None
    p = Path(parent).expanduser()
    return str(p.resolve()) if p.exists() else str(parent)


def read_manifest(ckpt: str | Path) -> dict | None:
    """The manifest of `ckpt`, or None for a checkpoint not written by evalsuite (e.g. llava-hf)."""
    path = Path(ckpt) / MANIFEST
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def resolve_parent(parent):
    """A manifest's parent as an absolute path when it names a directory here (a relative one was
    written from the same working directory), so result rows can link it to that checkpoint's rows."""
    if isinstance(parent, str) and parent and Path(parent).is_dir():
        return str(Path(parent).resolve())
    return parent


def checkpoint_hash(ckpt: str | Path) -> str:
    """Content hash of a checkpoint: sha256 over its (weight file name, sha256) pairs.

    Always computed from the bytes on disk (cached per file size + mtime within a process), so it
    describes what was evaluated even when a manifest is stale.
    """
    h = hashlib.sha256()
    for p in weight_files(ckpt):
        st = p.stat()
        h.update(f"{p.name}:{_file_digest(str(p.resolve()), st.st_size, st.st_mtime_ns)}\n".encode())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(path)
