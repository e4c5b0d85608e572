"""Helpers of the reliability cases: one error line, files on disk before/after, crafted bad files.

Every case checks three things (docs/reliability.md): the exact exit code, exactly one error line on
stderr and no traceback, and the files on disk before and after (nothing lost, nothing half-written).
Log records (timestamped INFO/WARNING lines) and progress bars may precede the error line; they are
not error lines. The contract is in docs/reliability.md.
"""
from __future__ import annotations

import hashlib
import re
import struct
import zlib
from pathlib import Path

_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(,\d+)? (DEBUG|INFO|WARNING) ")
# a tqdm bar on a terminal, or evalsuite.progress's line form (`desc: 3/10 batch (30%), 2 s`) elsewhere
_PROGRESS = re.compile(r"\d+%\|.*\||^[^:]*: \d+/\d+ \S+ \(\d+%\), \d+ s")


def error_lines(stderr: str) -> list[str]:
    """The stderr lines that are not log records or progress bars."""
    return [ln for ln in stderr.splitlines()
            if ln.strip() and not _LOG_LINE.match(ln) and not _PROGRESS.search(ln.split("\r")[-1])]


def one_error(res, code: int = 2, prefix: str = "evalsuite: error: ") -> str:
    """Assert the process exited `code` with exactly one error line starting with `prefix`; return it."""
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = error_lines(res.stderr)
    assert res.returncode == code, (res.returncode, res.stderr[-3000:])
    assert len(lines) == 1, res.stderr[-3000:]
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def snapshot(*roots: Path) -> dict[str, str]:
    """{path: sha256} of every file under `roots` (missing roots count as empty)."""
    out = {}
    for root in roots:
        if Path(root).is_dir():
            for p in sorted(Path(root).rglob("*")):
                if p.is_file():
                    out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif Path(root).is_file():
            out[str(root)] = hashlib.sha256(Path(root).read_bytes()).hexdigest()
    return out


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(path: Path, width: int = 20000, height: int = 20000) -> Path:
    """A ~60-byte PNG whose header declares `width` x `height` pixels (a decompression bomb: PIL refuses
    it from the header alone, so no real pixels are needed)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)     # 1-bit greyscale
    idat = zlib.compress(b"\x00" * 16)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))
    return path
