"""Output folders may hold the user's own files: a command replaces a file of its fixed name only when
that file is one evalsuite wrote (`report --out DIR`'s index.html, `chair --output DIR`'s summary.json).

    refuse_foreign(out / "index.html", "--out", looks_like_report)

A file that is not ours is one UserError line naming it, before any work; other files in the folder
are never touched.
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


def _head(path: Path, n: int = 1 << 16) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def looks_like_report(path: Path) -> bool:
    """An `evalsuite report` page (its generator tag, or an older page that names evalsuite)."""
    return b"evalsuite" in _head(path)

