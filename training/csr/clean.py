"""Junk filters for new sentences (docs/csr-method.md §3.2(b)); a hit drops the child and its subtree.

`junk_reason(text, min_chars)` returns the first rule a sentence breaks, or None. The rules are the
released code's: foreign scripts (Korean, kana, Cyrillic) and emoji, repeated `&nbsp;`, a word said 6+
times in a row, a character repeated 11+ times (spaces allowed between repeats), the literal
degenerate strings, more than 5 newlines, and a sentence shorter than `min_chars` characters.
"""
from __future__ import annotations

import re

_FOREIGN = re.compile(
    "[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"  # Hangul jamo, compatibility jamo, syllables
    "\u3040-\u30ff"  # Hiragana + Katakana
    "\u0400-\u04ff"  # Cyrillic
    "\U0001f000-\U0001faff\u2600-\u27bf]"  # emoji and pictographs, dingbats
)
_NBSP = re.compile(r"(?:&nbsp;\s*){2,}")
_WORD_REPEAT = re.compile(r"\b(\w+)\b(?:\W+\1\b){5,}", re.IGNORECASE)
_CHAR_REPEAT = re.compile(r"(\S)(?:\s*\1){10,}")
_LITERALS = ("ttttttttttt", "sssssssssss", ", , , , ", "''''''''''")


def junk_reason(text: str, min_chars: int = 4) -> str | None:
    """Name of the first cleaning rule `text` breaks, or None when it is a usable sentence."""
    if _FOREIGN.search(text):
        return "foreign_script"
    if _NBSP.search(text):
        return "nbsp"
    if _WORD_REPEAT.search(text):
        return "word_repeat"
    if _CHAR_REPEAT.search(text):
        return "char_repeat"
    if any(lit in text for lit in _LITERALS):
        return "degenerate_literal"
    if text.count("\n") > 5:
        return "newlines"
    if len(text.strip()) < min_chars:
        return "too_short"
    return None
