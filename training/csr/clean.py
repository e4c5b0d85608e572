"""Junk filters for new sentences (docs/csr-method.md §3.2(b)); a hit drops the child and its subtree.

`junk_reason(text, min_chars, rules)` returns the first rule a sentence breaks, or None. Two rule sets,
chosen by `tree.junk_rules` (docs/csr-fidelity.md, "Junk rules"):

* `released`: the released scorer's, read from the node's *new text* (`released_new_text`: the node's
  whole decoded text past len(parent's text) + 3 characters, stripped, then the released character
  whitelist, which deletes emoji, dingbats, "-" and most symbols first). A new text is junk when it holds
  Hangul syllables or compatibility jamo (U+3130-318F, U+AC00-D7AF), Cyrillic (U+0400-04FF), kana
  (U+3040-30FF) or an emoji of U+1F300-1F5FF, 1F600-1F64F, 1F680-1F6FF, 1F700-1F77F (never left after
  the whitelist, kept for completeness); two or more `&nbsp;` back to back; one word six or more times
  in a row, case-sensitive, separated by whitespace only (the last repeats may be prefixes of longer
  words: the back-reference has no closing word boundary); any character but a newline eleven or more
  times, with optional whitespace between (whitespace itself counts); one of the strings 11 x "t",
  11 x "s", 13 commas separated by single spaces, 10 x "'"; more than 5 newlines. Then it is too short
  when the new text, as it is, has fewer than `min_chars` characters (released: 4).
* `broad` (ours, the demo's): read from the decoded sentence itself; foreign scripts widened to Hangul
  Jamo, U+1F000-1FAFF and the dingbats U+2600-27BF (so "♪" counts), `&nbsp;` twice with whitespace
  between, word repeats case-insensitive across punctuation, ", , , , " (4 commas); character repeats
  of non-whitespace characters only; too short below `min_chars` characters after stripping.

tests/unit/test_csr_clean.py compares the `released` set with the released functions' own verdicts
(tests/data/csr_clean/released.json).
"""
from __future__ import annotations

import re
from typing import Iterable

# ------------------------------------------------------------------ released
_R_FOREIGN = re.compile("[\u3130-\u318f\uac00-\ud7af\u0400-\u04ff\u3040-\u30ff]")
_R_EMOJI = re.compile("[\U0001f300-\U0001f5ff\U0001f600-\U0001f64f\U0001f680-\U0001f6ff\U0001f700-\U0001f77f]")
_R_NBSP = re.compile("(?:&nbsp;){2,}")
_R_WORD_REPEAT = re.compile(r"\b(\w+)\b(?:\s+\1){5,}")
_R_CHAR_REPEAT = re.compile(r"(.)(?:\s*\1){10,}")
_R_LITERALS = ("t" * 11, "s" * 11, ", " * 12 + ",", "'" * 10)


# The released whitelist (docs/csr-fidelity.md, "Sentence text CLIP scores"): word characters, whitespace and the
# characters below survive, everything else is deleted. "-", "@", "~", "`", "|" and "\\" are not among
# them (the released character class spans '"' to '(' where a literal "-" was probably meant).
CLIP_KEEP = " !\"#$%&'()*+,./:;<=>?[]^{}\u20ac\u00a3\u00b0\u2122\u00a9\u00ae\u266b\u266a\u03c0\u221a"
_CLIP_DROP = re.compile("[^\\w\\s" + re.escape(CLIP_KEEP) + "]+")


def released_whitelist(text: str) -> str:
    return _CLIP_DROP.sub("", text)


def released_node_texts(tokenizer, tree, prompt_text: str, image_id: int | None,
                        nids: Iterable[int] | None = None) -> dict[int, str]:
    """Every node's text (of a `generate.Tree`) as the released sampler holds it: the root's is the prompt string; any other
    node's is its whole sequence (prompt, earlier sentences, this sentence with whatever followed an EOS)
    decoded without special tokens, except the image placeholder, kept once (an added, not a special,
    token for the released tokenizer: construct.py finds "USER: <image>" in the decoded leaf text).
    nids: only these nodes (and the root)."""
    special = set(tokenizer.all_special_ids) - {image_id}
    head, prev = [], None
    for t in tree.prompt_ids:
        if t not in special and not (t == image_id and prev == image_id):
            head.append(t)
        prev = t
    out = {0: prompt_text}
    for node in tree.nodes[1:] if nids is None else [tree.nodes[n] for n in sorted(set(nids) - {0})]:
        ids = head + [t for t in node.prefix_ids + node.sentence_ids if t not in special]
        out[node.id] = tokenizer.decode(ids, skip_special_tokens=False)
    return out


def released_new_text(text: str, parent_text: str) -> str:
    """The text the released filters (and its CLIP) read for a node: `text` past len(parent_text) + 3
    characters, stripped, whitelisted; with an empty parent text the whole text, whitelisted, unstripped."""
    return released_whitelist(text[len(parent_text) + 3:].strip() if parent_text else text)


def released_new_texts(vlm, tree, nids: Iterable[int]) -> list[str]:
    """For each node id, the text the released filters and CLIP read (`released_new_text` of its decoded
    text and its parent's): what `junk_rules: released` and `clip_text: released` judge."""
    from evalsuite.models.vlm import build_prompt

    nids = list(nids)
    # a str even where the processor holds an AddedToken (BLIP-2)
    image_id = vlm.tokenizer.convert_tokens_to_ids(vlm.inputs.image_token)
    texts = released_node_texts(vlm.tokenizer, tree, build_prompt(vlm, tree.question), image_id,
                                nids={*nids, *(tree.nodes[n].parent for n in nids)})
    return [released_new_text(texts[n], texts[tree.nodes[n].parent]) for n in nids]


# ------------------------------------------------------------------ broad (ours)
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


def _has_literal(literals):
    return lambda text: any(lit in text for lit in literals)


def _many_newlines(text: str) -> bool:
    return text.count("\n") > 5


# Each rule set in the order its rules are tried (the first one broken names the reason); "too_short" comes
# last: the released code measures the text as cut, ours the stripped sentence.
RULES = {
    "released": (("foreign_script", _R_FOREIGN.search), ("emoji", _R_EMOJI.search), ("nbsp", _R_NBSP.search),
                 ("word_repeat", _R_WORD_REPEAT.search), ("char_repeat", _R_CHAR_REPEAT.search),
                 ("degenerate_literal", _has_literal(_R_LITERALS)), ("newlines", _many_newlines)),
    "broad": (("foreign_script", _FOREIGN.search), ("nbsp", _NBSP.search), ("word_repeat", _WORD_REPEAT.search),
              ("char_repeat", _CHAR_REPEAT.search), ("degenerate_literal", _has_literal(_LITERALS)),
              ("newlines", _many_newlines)),
}


def junk_reason(text: str, min_chars: int, rules: str) -> str | None:
    """Name of the first rule of `rules` (`released` | `broad`) that `text` breaks, or None when it is a
    usable sentence. `released` expects the node's new text (`released_new_text`), `broad` the sentence."""
    if rules not in RULES:
        raise ValueError(f"junk rules {rules!r} is not one of {tuple(RULES)}")
    for name, broken in RULES[rules]:
        if broken(text):
            return name
    return "too_short" if len(text if rules == "released" else text.strip()) < min_chars else None
