"""Output folders may hold the user's own files: a command replaces a file of its fixed name only when
that file is one evalsuite wrote (`report --out DIR`'s index.html, `chair --output DIR`'s summary.json).

    refuse_foreign(out / "index.html", "--out", looks_like_report)

A file that is not ours is one UserError line naming it, before any work; other files in the folder
are never touched. A command whose output is a whole folder (`tiny-ckpt --out`, `world build --out`)
takes only a new or empty one (`refuse_nonempty`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from evalsuite.errors import UserError


def refuse_foreign(path: Path, flag: str, ours: Callable[[Path], bool]) -> None:
    path = Path(path)
    if path.is_symlink() or (path.exists() and (not path.is_file() or not ours(path))):
        raise UserError(f"{flag} {path.parent}: {path.name} there was not written by evalsuite and would be "
                        "replaced; move it, or pass another folder")


def refuse_nonempty(path: Path, flag: str) -> None:
    """One line when `path` is a file or a folder holding anything: the command would write over it."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise UserError(f"{flag} {path}: is a broken symbolic link; pass a new or empty folder")
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: is not a directory; pass a new or empty folder")
    if path.is_dir() and any(path.iterdir()):
        raise UserError(f"{flag} {path}: exists and is not empty; pass a new or empty folder")


def _head(path: Path, n: int = 1 << 16) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def _tail(path: Path, n: int = 1 << 16) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - n))
            return fh.read(n)
    except OSError:
        return b""


def looks_like_pope(path: Path) -> bool:
    """A `pope build` question file: its JSON rows (or the parquet footer's schema) name POPE's columns."""
    if path.suffix == ".parquet":
        return _head(path, 4) == b"PAR1" and b"question_id" in _tail(path) and b"category" in _tail(path)
    head = _head(path)
    return head.lstrip().startswith(b"[") and b'"question_id"' in head and b'"category"' in head


def looks_like_report(path: Path) -> bool:
    """An `evalsuite report` page (its generator tag, or an older page that names evalsuite)."""
    return b"evalsuite" in _head(path)

