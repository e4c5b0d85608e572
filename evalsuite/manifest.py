"""`evalsuite.json`: the manifest every checkpoint directory the project writes carries.

It says what the checkpoint is (iteration, parent, method), how it was made (resolved config, data
hash, code version) and what its weights are (sha256 per weight file), so a result row can name its
checkpoint by content and a reader can tell when weights were changed behind its back.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from evalsuite.errors import UserError
from evalsuite.files import sha256_file, write_json_atomic

# the content hash of a checkpoint lives with every other identity (one file-hash memo)
from evalsuite.identity import WEIGHT_SUFFIXES, checkpoint_hash, weight_files  # noqa: F401

MANIFEST = "evalsuite.json"
SCHEMA = 1


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
