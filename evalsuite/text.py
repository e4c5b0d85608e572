"""The one sentence splitter of evalsuite: CLIP relevance scores and the CSR loop both cut text with it.

A sentence ends at `.`, `!` or `?` (a run of them, plus closing quotes/brackets) followed by
whitespace, or at a line break. Not a boundary: a period after a common abbreviation ("e.g.", "Mr.")
and a period inside a token ("3.5", "a.m"), since no whitespace follows it.
Leading list markers ("- ", "* ", "1. ", "2) ") are formatting, not content, so they are dropped:
CLIP should see "A cat sits.", not "1. A cat sits.". Pieces without a letter or digit ("...", "-")
carry nothing to score and are dropped too, so `split_sentences("")` is `[]`.
"""
from __future__ import annotations

import re

# lower-cased, without the final period; "etc." is left out on purpose: it ends a sentence more often
# than not in VLM captions ("... plates, cups, etc. The table ...")
_ABBREVIATIONS = frozenset(
    {"e.g", "i.e", "mr", "mrs", "ms", "dr", "st", "vs", "no", "fig", "approx", "jr", "sr", "prof", "inc", "ltd"}
)
_BOUNDARY = re.compile(r"([.!?]+[\"'\u201d\u2019)\]]*)\s+")
_LIST_MARKER = re.compile(r"^\s*(?:[-*\u2022]|\d{1,3}[.)])\s+")
_HAS_CONTENT = re.compile(r"\w")


def split_sentences(text: str) -> list[str]:
    """Split `text` into stripped sentences, in order (rules in the module docstring)."""
    sentences: list[str] = []
    for line in text.splitlines():
        line = _LIST_MARKER.sub("", line, count=1)
        start = 0
        for m in _BOUNDARY.finditer(line):
            if _ends_with_abbreviation(line[start:m.start(1)], m.group(1)):
                continue
            _keep(sentences, line[start:m.end(1)])
            start = m.end()
        _keep(sentences, line[start:])
    return sentences


def _ends_with_abbreviation(before: str, punct: str) -> bool:
    """True when a lone '.' closes an abbreviation rather than a sentence."""
    if punct.rstrip("\"'\u201d\u2019)]") != ".":
        return False
    words = before.split()
    if not words:
        return False
    return words[-1].lstrip("\"'(\u201c\u2018[").lower() in _ABBREVIATIONS


def _keep(out: list[str], piece: str) -> None:
    piece = piece.strip()
    if _HAS_CONTENT.search(piece):
        out.append(piece)
