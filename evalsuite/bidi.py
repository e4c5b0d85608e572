"""Bidirectional and zero-width control characters in user and model text, made harmless for display.

An answer, label or checkpoint name holding U+202E (RIGHT-TO-LEFT OVERRIDE) displays the text after it
reversed ("abc\\u202Egpj.exe" reads "abcexe.jpg"); zero-width characters hide differences between two
strings that look equal. Wherever such text is shown (the HTML report, stderr lines, `evalsuite table`),
each of these characters is replaced by a visible "⟨U+202E⟩", and in the report a text that can change
its neighbours' direction is isolated as <bdi> isolates it (U+2068 FIRST STRONG ISOLATE ... U+2069 POP
DIRECTIONAL ISOLATE: valid in text and in attribute values alike). Stdlib only: errors.py imports it.
"""
from __future__ import annotations

import re

# embeddings/overrides, isolates, zero-width space/joiners and directional marks, Arabic letter mark, BOM
CONTROLS = ("\u202a\u202b\u202c\u202d\u202e" "\u2066\u2067\u2068\u2069" "\u200b\u200c\u200d\u200e\u200f"
            "\u061c" "\ufeff")
_VISIBLE = {ord(c): f"\u27e8U+{ord(c):04X}\u27e9" for c in CONTROLS}
_CONTROL = re.compile(f"[{CONTROLS}]")
# strong right-to-left letters (Hebrew, Arabic, Syriac, Thaana, NKo, ... and their presentation forms)
_RTL = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc\U00010800-\U00010fff\U0001e800-\U0001efff]")
FSI, PDI = "\u2068", "\u2069"


def visible(text: str) -> str:
    """`text` with every bidi / zero-width control character written out as ⟨U+XXXX⟩."""
    return text.translate(_VISIBLE) if _CONTROL.search(text) else text


def isolated(text: str) -> str:
    """`visible(text)`, wrapped in FSI ... PDI when it held a control character or right-to-left letters
    (text of only left-to-right and neutral characters cannot reorder its neighbours, and stays as it is:
    numbers and sort keys of the report keep their plain form)."""
    shown = visible(text)
    return f"{FSI}{shown}{PDI}" if shown is not text or _RTL.search(shown) else shown
