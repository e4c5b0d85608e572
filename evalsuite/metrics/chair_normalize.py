"""CHAIR's tokeniser and its two token normalisers: pattern-style singularisation and POS+WordNet lemmas.

* `Tokenizer`: `nltk.word_tokenize(caption.lower())` (Punkt sentences, then the Treebank word
  tokenizer), built once and reused.
* `pattern_singularize`: pattern 3.6's `singularize`, which the CHAIR paper's script used. pattern is
  not installable any more; textblob carries its rule tables, and its function differs from
  pattern 3.6 in a few places, so the function is written here over textblob's tables with pattern
  3.6's behaviour (see the function's docstring).
* `LemmaNormalizer`: OPERA's normaliser: `nltk.pos_tag` over the caption's whole token list, then
  `WordNetLemmatizer().lemmatize(tok, pos)` with pos from the Penn tag's first letter.

Every normaliser caches per unique token (or (token, pos)): a corpus of captions has few distinct ones.
"""
from __future__ import annotations

import functools
import logging

from evalsuite.metrics import nltk_resources as res

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _pattern_tables():
    from textblob.en import inflect as tb

    # pattern 3.6's uninflected list has "christmas" and not "jeans" (pattern: jeans -> jean).
    uninflected = tuple(w for w in tb.singular_uninflected if w != "jeans") + ("christmas",)
    return {
        "uninflected": uninflected,
        "uncountable": tuple(tb.singular_uncountable),
        "ie": tuple(w + "s" for w in tb.singular_ie),
        "s": tuple(w + "es" for w in tb.singular_s),
        "irregular": tuple((w, __import__("re").compile("(?i)" + w + "$"), s)
                           for w, s in tb.singular_irregular.items()),
        "rules": tuple(tb.singular_rules),
        "prepositions": frozenset(tb.plural_prepositions),
    }


def _singularize(word: str) -> str:
    t = _pattern_tables()
    if "-" in word:  # compounds such as mothers-in-law singularise their head
        parts = word.split("-")
        if len(parts) > 1 and parts[1] in t["prepositions"]:
            return _singularize(parts[0]) + "-" + "-".join(parts[1:])
    if word.endswith("'"):  # dogs' -> dog's
        return _singularize(word[:-1]) + "'s"
    lower = word.lower()
    # A word that is a suffix of an uninflected/uncountable word stays (so "is", "as" survive).
    for w in t["uninflected"]:
        if w.endswith(lower):
            return word
    for w in t["uncountable"]:
        if w.endswith(lower):
            return word
    # pattern 3.6 returns the -ie plural unchanged (doggies stays doggies; textblob gives doggie).
    for w in t["ie"]:
        if lower.endswith(w):
            return lower
    # pattern 3.6 strips "es" from the word itself (omnibuses -> omnibus; textblob gives bus).
    for w in t["s"]:
        if lower.endswith(w):
            return lower[:-2]
    for w, rx, singular in t["irregular"]:
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


_SING_CACHE: dict[str, str] = {}


def pattern_singularize(word: str) -> str:
    """pattern 3.6 `singularize(word)` (noun, no custom table), cached per word.

    Where textblob 0.20.1 differs from pattern 3.6, pattern's behaviour is kept: "-ie" plurals
    (doggies, collies, cookies) are returned unchanged, "s-singular" words drop "es" from the word
    itself (omnibuses -> omnibus, not bus), "christmas" and its suffixes ("as") are uninflected and
    "jeans" is not. Checked against pattern's own output in singularize/tokens.tsv (golden).
    """
    out = _SING_CACHE.get(word)
    if out is None:
        out = _SING_CACHE[word] = _singularize(word)
    return out


class Tokenizer:
    """`nltk.word_tokenize(text.lower())` with the Punkt model loaded once."""

    def __init__(self) -> None:
        res.find_resource(res.PUNKT)
        from nltk.tokenize import NLTKWordTokenizer
        from nltk.tokenize.punkt import PunktTokenizer

        self._punkt = PunktTokenizer("english")
        self._words = NLTKWordTokenizer()

    def __call__(self, text: str) -> list[str]:
        wt = self._words.tokenize
        return [tok for sent in self._punkt.tokenize(text.lower()) for tok in wt(sent)]


class PatternNormalizer:
    """The `original` variant's normaliser: singularise token by token, no POS."""

    name = "pattern"
    resources = (res.PUNKT,)

    def __call__(self, tokens: list[str]) -> list[str]:
        cache = _SING_CACHE
        return [cache.get(t) or pattern_singularize(t) for t in tokens]


def penn_to_wordnet(tag: str) -> str:
    """OPERA's map: J -> a, V -> v, N -> n, R -> r, anything else -> n."""
    return {"J": "a", "V": "v", "N": "n", "R": "r"}.get(tag[:1], "n")


class LemmaNormalizer:
    """The `opera*` variants' normaliser: POS-tag the whole caption, lemmatise with WordNet."""

    name = "nltk_lemma"
    resources = (res.PUNKT, res.TAGGER, res.WORDNET)

    def __init__(self) -> None:
        res.require(self.resources)
        from nltk.stem import WordNetLemmatizer
        from nltk.tag.perceptron import PerceptronTagger

        self._tagger = PerceptronTagger()
        self._lemmatize = WordNetLemmatizer().lemmatize
        self._cache: dict[tuple[str, str], str] = {}
        self._lemmatize("dogs", "n")  # WordNet loads lazily (9-15 s): pay it now, once

    def __call__(self, tokens: list[str]) -> list[str]:
        cache = self._cache
        out = []
        for tok, tag in self._tagger.tag(tokens):
            key = (tok, penn_to_wordnet(tag))
            lemma = cache.get(key)
            if lemma is None:
                lemma = cache[key] = self._lemmatize(*key)
            out.append(lemma)
        return out
