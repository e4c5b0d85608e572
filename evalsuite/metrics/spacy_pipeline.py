"""The spaCy pipeline a metric reads (AMBER's similarity, Object HalBench's tags and lemmas): loaded by name or
from a directory, checked for what the metric needs, and its identity for eval keys.

    nlp = load_pipeline("en_core_web_lg", "amber.spacy_model", needs_vectors)
    pipeline_identity(nlp, "vectors", "vocab")
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from evalsuite.errors import UserError

INSTALL_HINT = ("on a connected machine: `python -m spacy download {name}` (or pip install its wheel from "
                "github.com/explosion/spacy-models), or pass a local pipeline directory")


def load_pipeline(name: str, option: str, check: Callable[[object], str | None], no_spacy: str = ""):
    """An installed spaCy pipeline by name, or a pipeline directory, loaded from disk. `option` is the setting
    named in every message (e.g. "amber.spacy_model"); `check(nlp)` returns what the pipeline lacks for this
    metric, or None; `no_spacy` ends the message when spaCy itself is missing (the task's way out)."""
    try:
        import spacy
    except ImportError:
        raise UserError(f"{option}: needs spaCy, which is not installed: pip install 'evalsuite[amber]'"
                        f"{no_spacy}") from None
    path = Path(name)
    try:
        if path.is_dir():
            nlp = spacy.load(path)
        elif spacy.util.is_package(name):
            nlp = spacy.load(name)
        else:
            raise UserError(f"{option}: {name!r} is neither an installed spaCy pipeline nor a directory; "
                            f"{INSTALL_HINT.format(name=name)}")
    except (OSError, ValueError, ImportError) as e:   # a broken directory, or a package missing its code
        raise UserError(f"{option}: {name}: cannot load this spaCy pipeline "
                        f"({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})") from None
    problem = check(nlp)
    if problem:
        raise UserError(f"{option}: {name}: {problem}")
    if nlp.path is None:
        raise UserError(f"{option}: {name}: the pipeline was not loaded from disk; it has no digest")
    return nlp


def pipeline_identity(nlp, field: str, part: str = "") -> dict:
    """The pipeline's name and version, spaCy's version, and under `field` a digest of the files under `part`
    of its directory (all of them when empty): what the metric reads of it. `nlp` comes from load_pipeline."""
    import spacy

    from evalsuite.metrics.nltk_resources import tree_sha256

    meta = nlp.meta
    return {"pipeline": f"{meta.get('lang')}_{meta.get('name')}", "version": meta.get("version"),
            "spacy": spacy.__version__, field: tree_sha256(Path(nlp.path) / part)[:16]}
