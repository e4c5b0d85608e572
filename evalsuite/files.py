"""File helpers: atomic writes (a reader never sees a half-written file, a killed writer leaves the old
one intact), path confinement, an early writability check and the one JSON / JSON Lines record reader."""
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


def ensure_writable_dir(path: str | os.PathLike, flag: str, create: bool = True) -> Path:
    """Check that `path` is (or can become) a directory we can write into, before any expensive work.

    Probes by really creating a temp file (permission bits, a read-only mount and a path under a regular
    file all show up that way, also for root). create=True makes the directory first and probes in it;
    create=False creates nothing and probes in the nearest existing ancestor, so a run that fails later
    leaves no empty folder (and concurrent ranks cannot remove each other's). Raises UserError
    "FLAG PATH: is not a directory" / "FLAG PATH: not writable (reason)".
    """
    from evalsuite.errors import UserError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: is not a directory")
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
        probe_dir = next(p for p in [path, *path.absolute().parents] if p.exists())
        if not probe_dir.is_dir():
            raise NotADirectoryError
        fd, probe = tempfile.mkstemp(dir=probe_dir, prefix=".write-probe-", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except (NotADirectoryError, FileExistsError):
        raise UserError(f"{flag} {path}: is not a directory (a parent is a file)") from None
    except OSError as e:
        raise UserError(f"{flag} {path}: not writable ({e.strerror or e})") from None
    return path


def read_input_bytes(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of a user's input file; "PATH: WHAT not found" / "PATH: WHAT unreadable (why)" else."""
    from evalsuite.errors import UserError

    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found") from None
    except OSError as e:
        raise UserError(f"{path}: {what} unreadable ({e.strerror or e})") from None


def read_json_records(path: str | os.PathLike, what: str = "records", jsonl: bool | None = None,
                      unwrap: str | None = None) -> list[tuple[str, Any]]:
    """[(where, value)] of a JSON list file or a JSON Lines file; every bad input is a UserError.

    jsonl=None decides by content: a file starting with "[" is one JSON list, anything else is JSON
    Lines. `where` is "FILE:LINE" for a JSON Lines record and "FILE[i]" for a list element, for the
    caller's own messages. Errors: missing file, non-UTF-8 bytes (naming line and byte offset), invalid
    JSON (naming the line), a document that is not a list (`unwrap="data"` accepts {"data": [...]}).
    """
    from evalsuite.errors import UserError

    path = Path(path)
    data = read_input_bytes(path, f"{what} file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                        "save the file as UTF-8") from None
    if jsonl is None:
        jsonl = not text.lstrip().startswith("[")
    if jsonl:
        return [(f"{path}:{n}", _json(line, path, n)) for n, line in enumerate(text.splitlines(), 1)
                if line.strip()]
    doc = _json(text, path, None)
    if unwrap and isinstance(doc, dict) and isinstance(doc.get(unwrap), list):
        doc = doc[unwrap]
    if not isinstance(doc, list):
        raise UserError(f"{path}: expected a JSON list of {what} (or JSON Lines), got {type(doc).__name__}")
    return [(f"{path}[{i}]", v) for i, v in enumerate(doc)]


def _json(text: str, path: Path, line: int | None) -> Any:
    from evalsuite.errors import UserError

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{line or e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
    except RecursionError:
        raise UserError(f"{path}:{line or 1}: not valid JSON (nested too deeply)") from None
    except ValueError as e:   # an int of more than 4300 digits: Python's own limit
        raise UserError(f"{path}:{line or 1}: not valid JSON ({str(e)[:120]})") from None
