"""CHAIR's two token normalisers, as the reference scripts call them.

* `pattern_singularize`: pattern 3.6's `singularize`, which the CHAIR paper's script used. pattern is
  not installable any more; textblob carries its rule tables, and its function differs from
  pattern 3.6 in a few places, so the function is written here over textblob's tables with pattern
  3.6's behaviour (see the function's docstring).
* `LemmaNormalizer`: OPERA's normaliser: `nltk.pos_tag` over the caption's whole token list, then
  `WordNetLemmatizer().lemmatize(tok, pos)` with pos from the Penn tag's first letter.

The only speed-ups are memos at the natural seams: singularising or lemmatising one word is a pure
function of the word (and its WordNet pos), so each is an `lru_cache`; tagging is
`FastPerceptronTagger` (exact, see chair_tagger.py).
"""
from __future__ import annotations

import functools
import re

from evalsuite.metrics import nltk_resources as res

WORD_MEMO = 1 << 17  # distinct words memoised per normaliser (a bounded memo; captions use a few thousand)


@functools.lru_cache(maxsize=1)
def _pattern_tables() -> dict:
    from textblob.en import inflect as tb

    # pattern 3.6's uninflected list has "christmas" and not "jeans" (pattern: jeans -> jean).
    uninflected = tuple(w for w in tb.singular_uninflected if w != "jeans") + ("christmas",)
    return {
        "kept": uninflected + tuple(tb.singular_uncountable),
        "ie": tuple(w + "s" for w in tb.singular_ie),
        "s": tuple(w + "es" for w in tb.singular_s),
        "irregular": tuple((w, re.compile("(?i)" + w + "$"), s) for w, s in tb.singular_irregular.items()),
        "rules": tuple(tb.singular_rules),
        "prepositions": frozenset(tb.plural_prepositions),
    }


@functools.lru_cache(maxsize=WORD_MEMO)
def pattern_singularize(word: str) -> str:
    """pattern 3.6 `singularize(word)` (noun, no custom table), memoised per word.

    textblob 0.20.1's `singularize` step by step, except where it differs from pattern 3.6, whose
    behaviour is kept: "-ie" plurals (doggies, collies, cookies) are returned unchanged (lowercased),
    "s-singular" words drop "es" from the word itself (omnibuses -> omnibus, not bus), "christmas"
    and its suffixes ("as") are uninflected and "jeans" is not. Checked against pattern's own output
    in the golden singularize/tokens.tsv (tests/golden).
    """
    t = _pattern_tables()
    if "-" in word:  # compounds such as mothers-in-law singularise their head
        parts = word.split("-")
        if len(parts) > 1 and parts[1] in t["prepositions"]:
            return pattern_singularize(parts[0]) + "-" + "-".join(parts[1:])
    if word.endswith("'"):  # dogs' -> dog's
        return pattern_singularize(word[:-1]) + "'s"
    lower = word.lower()
    if any(w.endswith(lower) for w in t["kept"]):  # a suffix of an uninflected word stays ("is", "as")
        return word
    if lower.endswith(t["ie"]):
        return lower
    if lower.endswith(t["s"]):
        return lower[:-2]
    for w, rx, singular in t["irregular"]:  # the first irregular ending in table order wins
        if lower.endswith(w):
            return rx.sub(singular, word)
    for suffix, inflection in t["rules"]:
        m = suffix.search(word)
        if m:
            for k, g in enumerate(m.groups()):  # unmatched optional groups drop their backreference
                if g is None:
                    inflection = inflection.replace("\\" + str(k + 1), "")
            return suffix.sub(inflection, word)
    return word


class PatternNormalizer:
    """The `original` variant's normaliser: singularise token by token, no POS."""

    resources = (res.PUNKT,)

    def __init__(self) -> None:
        _pattern_tables()  # import textblob and compile its rules while loading

    def __call__(self, tokens: list[str]) -> list[str]:
        return list(map(pattern_singularize, tokens))


_PENN_TO_WORDNET = {"J": "a", "V": "v", "N": "n", "R": "r"}


def penn_to_wordnet(tag: str) -> str:
    """OPERA's map: J -> a, V -> v, N -> n, R -> r, anything else -> n."""
    return _PENN_TO_WORDNET.get(tag[:1], "n")


class LemmaNormalizer:
    """The `opera*` variants' normaliser: POS-tag the whole caption, lemmatise with WordNet.

    The tags are `PerceptronTagger.tag`'s exactly, computed by `FastPerceptronTagger` (NLTK's
    pure-Python scoring was 90% of the `opera` variants' time).
    """

    resources = (res.PUNKT, res.TAGGER, res.WORDNET)

    def __init__(self) -> None:
        res.require(self.resources)
        from nltk.stem import WordNetLemmatizer
        from nltk.tag.perceptron import PerceptronTagger

        from evalsuite.metrics.chair_tagger import FastPerceptronTagger

        self._tags = FastPerceptronTagger(PerceptronTagger()).tags
        self._lemmatize = functools.lru_cache(maxsize=WORD_MEMO)(WordNetLemmatizer().lemmatize)
        self._lemmatize("dogs", "n")  # WordNet loads lazily (5-15 s): pay it now, once

    def __call__(self, tokens: list[str]) -> list[str]:
        lemmatize = self._lemmatize
        return [lemmatize(tok, penn_to_wordnet(tag)) for tok, tag in zip(tokens, self._tags(tokens))]
