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
import re

from evalsuite.metrics import nltk_resources as res

log = logging.getLogger(__name__)


def _literal_end(pattern: str) -> str:
    """The literal letters a rule's match must end with ("ices" for "(matr)ices$"; "" if none)."""
    if not pattern.endswith("$"):
        return ""
    body = pattern[:-1]
    i = len(body)
    while i > 0 and body[i - 1].isalpha():
        i -= 1
    if i > 0 and body[i - 1] == "\\":  # "\\s$" ends with a class, not with "s"
        i += 1
    return body[i:].lower()


def _rules_by_last(rules) -> dict[str, tuple]:
    """last letter -> the (rule, inflection, literal ending) that an ASCII word ending in it can
    match, in table order; key "" holds the rules with no literal ending (any word may match)."""
    ends = [_literal_end(r.pattern) for r, _ in rules]
    keys = {e[-1] for e in ends if e} | {""}
    return {k: tuple((r, inf, e) for (r, inf), e in zip(rules, ends) if not e or (k and e[-1] == k))
            for k in keys}


def _rules_by_last2(by_last: dict[str, tuple]) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """`_rules_by_last` narrowed by a second letter: (last two letters -> the rules a word ending in
    them can match, for every two letters that end a literal ending of 2+ letters; last letter ->
    the rules with an ending of at most 1 letter, for a word whose last two letters end none)."""
    ends = {c[2] for rules in by_last.values() for c in rules}
    by2 = {e[-2:]: tuple(c for c in by_last[e[-1]] if len(c[2]) <= 1 or c[2].endswith(e[-2:]))
           for e in ends if len(e) >= 2}
    short = {k: tuple(c for c in rules if len(c[2]) <= 1) for k, rules in by_last.items()}
    return by2, short


def _ascii_candidates(t: dict, lower: str) -> tuple:
    """The rules (table order) whose literal ending an ASCII word `lower` can have."""
    by_last = t["rules_by_last"]
    if len(lower) < 2:
        return by_last.get(lower, by_last[""])
    candidates = t["rules_by_last2"].get(lower[-2:])
    return candidates if candidates is not None else t["rules_short"].get(lower[-1], by_last[""])


def _tails(endings: tuple[str, ...] | list[str]) -> frozenset[str]:
    """Last two letters of every ending (all have 2+ letters: a word ending in one ends in those)."""
    assert all(len(e) >= 2 for e in endings)
    return frozenset(e[-2:] for e in endings)


@functools.lru_cache(maxsize=1)
def _pattern_tables():
    from textblob.en import inflect as tb

    # pattern 3.6's uninflected list has "christmas" and not "jeans" (pattern: jeans -> jean).
    uninflected = tuple(w for w in tb.singular_uninflected if w != "jeans") + ("christmas",)
    uncountable = tuple(tb.singular_uncountable)
    irregular = tuple((w, re.compile("(?i)" + w + "$"), s) for w, s in tb.singular_irregular.items())
    rules = tuple(tb.singular_rules)
    by_last = _rules_by_last(rules)
    by_last2, rules_short = _rules_by_last2(by_last)
    ie, s = tuple(w + "s" for w in tb.singular_ie), tuple(w + "es" for w in tb.singular_s)
    for suffix, inflection in rules:  # `re` parses a replacement template on its first `sub`: now
        suffix.sub(inflection, "")
    return {
        # `any(w.endswith(x) for w in words)` <=> x is a suffix ("" included) of one of the words
        "kept": frozenset(w[i:] for w in uninflected + uncountable for i in range(len(w) + 1)),
        "ie": ie,
        "s": s,
        "irregular": irregular,
        "irregular_ends": tuple(w for w, _, _ in irregular),
        "ie_tails": _tails(ie),
        "s_tails": _tails(s),
        "irregular_tails": _tails([w for w, _, _ in irregular]),
        "rules": rules,
        # an ASCII word without "\n" can match a rule only if it ends with its literal ending
        # (lowercased; every rule with letters there is case-insensitive or all lowercase)
        "rules_by_last": by_last,
        "rules_by_last2": by_last2,
        "rules_short": rules_short,
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
    if lower in t["kept"]:
        return word
    # each ending list is tried only if the word's last two characters end one of its entries
    tail = lower[-2:]
    # pattern 3.6 returns the -ie plural unchanged (doggies stays doggies; textblob gives doggie).
    if tail in t["ie_tails"] and lower.endswith(t["ie"]):
        return lower
    # pattern 3.6 strips "es" from the word itself (omnibuses -> omnibus; textblob gives bus).
    if tail in t["s_tails"] and lower.endswith(t["s"]):
        return lower[:-2]
    if tail in t["irregular_tails"] and lower.endswith(t["irregular_ends"]):
        for w, rx, singular in t["irregular"]:  # the first irregular ending in table order wins
            if lower.endswith(w):
                return rx.sub(singular, word)
    if word.isascii() and "\n" not in word:
        candidates = _ascii_candidates(t, lower)
    else:  # re's (?i) folds some non-ASCII letters onto ASCII ones: try every rule
        candidates = tuple((r, inf, "") for r, inf in t["rules"])
    for suffix, inflection, end in candidates:
        if not lower.endswith(end):
            continue
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


_CLOSERS_ONLY = frozenset("])}>\"'")
# ASCII separators that `str.split()` splits on but NLTK's regexes do not read as whitespace
_SPLIT_ONLY_WS = re.compile("[\x1c-\x1f]")
# The only all-letter words a Treebank rule changes (MacIntyre contractions: can|not, gon|na, ...).
_SPLIT_WORDS = frozenset({"cannot", "gimme", "gonna", "gotta", "lemme", "wanna"})


def _plain_chunk(kind: int, chunk: str) -> list[str] | None:
    """Tokens of a chunk that is a plain word, optionally with one trailing "," or "."; else None.

    No Treebank rule touches an ASCII all-letter word (bar `_SPLIT_WORDS`); a trailing comma before
    whitespace or the end is always split off; a trailing period only at the sentence's end
    (kind 0: the only chunk, 3: the last one), mid-sentence it stays attached ("mr.").
    """
    word, last = chunk[:-1], chunk[-1]
    if last.isalpha():
        word, last = chunk, ""
    if not (word.isascii() and word.isalpha()) or word in _SPLIT_WORDS:
        return None
    if not last:
        return [word]
    if last == ",":
        return [word, ","]
    if last == ".":
        return [word, "."] if kind in (0, 3) else [chunk]
    return None


class Tokenizer:
    """`nltk.word_tokenize(text.lower())`, exactly, with the Punkt model loaded once and memoised.

    NLTK's own Punkt and Treebank code do the work; two memos make it fast:
    * Punkt's break decision for a candidate ("word." + next token) depends only on that context,
      so `text_contains_sentbreak` is cached per context string;
    * the Treebank rules look at most one character across whitespace, and only the sentence's
      first/last chunk see its start/end (`^"`, the final period), so each whitespace-separated
      chunk is tokenised once per (position kind, chunk) with a sentinel word "x" standing in for
      its neighbours. Sentences where that could differ (non-ASCII; a last chunk made only of
      closing brackets/quotes, which the final-period rule reaches across) are tokenised whole.
    `tests/golden/test_chair_golden.py` checks the result equals `nltk.word_tokenize` token for token.
    """

    def __init__(self) -> None:
        res.find_resource(res.PUNKT)
        from nltk.tokenize import NLTKWordTokenizer
        from nltk.tokenize.punkt import PunktTokenizer

        self._punkt = PunktTokenizer("english")
        # instance attribute shadows the method that Punkt's span search calls per candidate
        self._punkt.text_contains_sentbreak = functools.lru_cache(maxsize=1 << 16)(
            self._punkt.text_contains_sentbreak)
        self._words = NLTKWordTokenizer()
        self._chunks: dict[tuple[int, str], list[str]] = {}

    def _chunk(self, kind: int, chunk: str) -> list[str]:
        toks = _plain_chunk(kind, chunk)
        if toks is not None:
            self._chunks[(kind, chunk)] = toks
            return toks
        wt = self._words.tokenize
        if kind == 0:
            toks = wt(chunk)
        elif kind == 1:
            toks = wt(chunk + " x")[:-1]
        elif kind == 2:
            toks = wt("x " + chunk + " x")[1:-1]
        else:
            toks = wt("x " + chunk)[1:]
        self._chunks[(kind, chunk)] = toks
        return toks

    def sentence(self, sent: str) -> list[str]:
        chunks = sent.split()
        n = len(chunks)
        if n == 0:
            return []
        if not sent.isascii() or _SPLIT_ONLY_WS.search(sent) or (n > 1 and _CLOSERS_ONLY.issuperset(chunks[-1])):
            return self._words.tokenize(sent)
        if n == 1:
            return self._chunks.get((0, sent)) or self._chunk(0, chunks[0])
        memo, out = self._chunks, []
        last = n - 1
        for i, c in enumerate(chunks):
            kind = 1 if i == 0 else (3 if i == last else 2)
            toks = memo.get((kind, c))
            out += toks if toks is not None else self._chunk(kind, c)
        return out

    def __call__(self, text: str) -> list[str]:
        out: list[str] = []
        for sent in self._punkt.tokenize(text.lower()):
            out += self.sentence(sent)
        return out


class PatternNormalizer:
    """The `original` variant's normaliser: singularise token by token, no POS."""

    name = "pattern"
    resources = (res.PUNKT,)

    def __init__(self) -> None:
        _pattern_tables()  # import textblob and compile the rule tables while loading

    def __call__(self, tokens: list[str]) -> list[str]:
        try:
            return list(map(_SING_CACHE.__getitem__, tokens))
        except KeyError:  # first sight of some tokens: memoise them all, then map again
            for token in set(tokens).difference(_SING_CACHE):
                _SING_CACHE[token] = _singularize(token)
            return list(map(_SING_CACHE.__getitem__, tokens))


def penn_to_wordnet(tag: str) -> str:
    """OPERA's map: J -> a, V -> v, N -> n, R -> r, anything else -> n."""
    return {"J": "a", "V": "v", "N": "n", "R": "r"}.get(tag[:1], "n")


class LemmaNormalizer:
    """The `opera*` variants' normaliser: POS-tag the whole caption, lemmatise with WordNet.

    The tags are `PerceptronTagger.tag`'s exactly, computed by `FastPerceptronTagger` (NLTK's
    pure-Python scoring was 90% of the `opera` variants' time).
    """

    name = "nltk_lemma"
    resources = (res.PUNKT, res.TAGGER, res.WORDNET)

    def __init__(self) -> None:
        res.require(self.resources)
        from nltk.stem import WordNetLemmatizer
        from nltk.tag.perceptron import PerceptronTagger

        from evalsuite.metrics.chair_tagger import FastPerceptronTagger

        self._tags = FastPerceptronTagger(PerceptronTagger()).tags
        self._lemmatize = WordNetLemmatizer().lemmatize
        self._by_pos: dict[tuple[str, str], str] = {}  # (token, WordNet pos) -> lemma
        self._cache: dict[tuple[str, str], str] = {}  # (token, Penn tag) -> lemma
        self._lemmatize("dogs", "n")  # WordNet loads lazily (9-15 s): pay it now, once

    def _lemma(self, key: tuple[str, str]) -> str:
        by_pos = (key[0], penn_to_wordnet(key[1]))
        lemma = self._by_pos.get(by_pos)
        if lemma is None:
            lemma = self._by_pos[by_pos] = self._lemmatize(*by_pos)
        self._cache[key] = lemma
        return lemma

    def __call__(self, tokens: list[str]) -> list[str]:
        pairs = zip(tokens, self._tags(tokens))
        try:
            return list(map(self._cache.__getitem__, pairs))
        except KeyError:  # first sight of some (token, tag): the zip is spent, so redo the caption
            get = self._cache.get
            return [s if (s := get(k)) is not None else self._lemma(k) for k in zip(tokens, self._tags(tokens))]
