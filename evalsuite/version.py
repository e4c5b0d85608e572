"""Code version recorded in every checkpoint manifest and every result row."""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from evalsuite import __version__


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """`git describe --always --dirty` of the source tree, or the package version outside git."""
    here = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=here, capture_output=True, text=True, timeout=5,
        )
        if out.returncode == 0 and out.stdout.strip():
            return f"{__version__}+{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    return __version__


def lmms_eval_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("lmms_eval")
    except metadata.PackageNotFoundError:
        return None
