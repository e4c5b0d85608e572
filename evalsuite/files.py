"""Atomic writes: a reader never sees a half-written file, a killed writer leaves the old one intact."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

_UMASK = os.umask(0)
os.umask(_UMASK)


def write_bytes_atomic(path: str | os.PathLike, data: bytes, overwrite: bool = True) -> Path:
    """Write via a temp file beside `path` + fsync, then move it into place whole.

    overwrite=False publishes with `os.link`, which raises FileExistsError instead of replacing an
    existing file, so two writers of one name cannot clobber each other.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=False, default=str) + "\n")


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    text = "".join(json.dumps(r, default=str) + "\n" for r in rows)
    return write_text_atomic(path, text)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def safe_join(root: str | os.PathLike, rel: str, field: str = "image") -> Path:
    """Join `rel` under `root`, refusing absolute paths and `..` that escape it (path traversal)."""
    from evalsuite.errors import UserError

    root_p = Path(root).resolve()
    cand = (root_p / rel).resolve()
    if cand != root_p and root_p not in cand.parents:
        raise UserError(f"{field} path {rel!r} escapes the image root {str(root_p)!r}")
    return cand
