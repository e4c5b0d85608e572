"""A fast exact `nltk.word_tokenize(caption.lower())` for CHAIR's hot path.

`word_tokenize` runs Punkt over the whole text, then NLTK's Treebank tokenizer on each sentence.
Almost every caption is *plain*: whitespace-separated chunks, each a word (`[a-z0-9]` runs joined by
single hyphens, optionally ending in "'s") optionally followed by one "," or ".". On such a text:

* Punkt's only candidate breaks are the periods followed by whitespace (no "?", "!", no period
  before punctuation), its context for a candidate is "W." + whitespace + next chunk (the text
  has no leading whitespace, so the word before is exactly the chunk), and after a break the next
  sentence starts at the next chunk, which starts with no closing bracket or quote, so
  `_realign_boundaries` never moves anything.
* For a word W that `_is_plain_break` accepts, Punkt breaks after "W." whatever follows: the first
  pass marks "W." a sentence break (it is no abbreviation) and the second pass can only undo that
  for a known collocation (W starts none), an initial or a number (W is neither); a context has at
  least one token after "W.", which is all `text_contains_sentbreak` needs.
* Treebank on a sentence of plain chunks splits off each trailing "," (followed by a space or the
  end), the sentence's final ".", and each "'s" clitic (`ENDING_QUOTES`); no other rule touches
  `[a-z0-9-']` text, bar the MacIntyre contractions (cannot, gonna, ...), which send the caption
  to the slow path, as does a word with "'" before a period or a "--".
Plain-ness is a property of each chunk (a mid chunk "W." is plain only if W is a plain-break word;
the last chunk's final period is always split off by Treebank's final-period rule), so it is
memoised per unique chunk string, and a caption of plain chunks is tokenised with `str.replace`
and `str.split`: per caption, a byte-level character check and C-level set lookups.
Anything else goes to `chair_normalize.Tokenizer` (NLTK's Punkt and Treebank, memoised).
`tests/unit/test_chair_tokenize.py` checks equality with `nltk.word_tokenize` on every golden
caption and on generated texts built to hit each branch.
"""
from __future__ import annotations

import re

_WS = r"[ \t\n\r\f\v]"  # string.whitespace: what Punkt's previous-word search looks for
_WORD = r"[a-z0-9]+(?:-[a-z0-9]+)*(?:'s)?"
_CHUNK = re.compile(rf"({_WORD})([.,]?)")
# MacIntyre contractions without an apostrophe (CONTRACTIONS2); a substring hit is enough to go slow.
_CONTRACTION = re.compile(r"cannot|gimme|gonna|gotta|lemme|wanna")
# Every character a plain caption may hold; with only these, `str.split()` splits on string.whitespace.
_ALLOWED = b"abcdefghijklmnopqrstuvwxyz0123456789 \t\n\r\f\v,.'-"
_WHITESPACE = " \t\n\r\f\v"


class FastTokenizer:
    """`nltk.word_tokenize(text.lower())`: memoised chunks for plain captions, NLTK otherwise."""

    def __init__(self) -> None:
        from evalsuite.metrics.chair_normalize import Tokenizer

        self.slow = Tokenizer()
        punkt = self.slow._punkt
        self._annotate = punkt._annotate_first_pass
        self._token_cls = punkt._Token
        self._colloc_firsts = frozenset(a for a, _ in punkt._params.collocations)
        self._ok: set[str] = set()        # plain chunks valid anywhere
        self._ok_last: set[str] = set()   # plain only as the caption's last chunk ("etc." at the end)
        self._bad: set[str] = set()       # chunks that send a caption to the slow path

    def _is_plain_break(self, word: str) -> bool:
        """Punkt breaks after `word + "."` whatever token follows (see the module docstring)."""
        # Punkt's word regex reads a plain "W." followed by whitespace or the end as one token (no
        # NonWord, MultiChar or "," inside it); the unit tests check that for every golden W.
        (aug,) = self._annotate([self._token_cls(word + ".")])
        typ = aug.type_no_period
        return bool(aug.sentbreak and not aug.abbr and not aug.ellipsis and not aug.is_initial
                    and typ != "##number##" and typ not in self._colloc_firsts)

    def _plain_chunk(self, chunk: str, last: bool) -> bool:
        m = _CHUNK.fullmatch(chunk)
        if m is None or _CONTRACTION.search(chunk) is not None:
            return False
        return m.group(2) != "." or last or self._is_plain_break(m.group(1))

    def _validate(self, chunks: list[str]) -> bool:
        """Classify the chunks not seen before; True when every chunk is plain in its position."""
        ok, bad = self._ok, self._bad
        for chunk in chunks[:-1]:
            if chunk in ok:
                continue
            if chunk in bad or not self._plain_chunk(chunk, False):
                bad.add(chunk)
                return False
            ok.add(chunk)
        last = chunks[-1]
        if last in ok or last in self._ok_last:
            return True
        if self._plain_chunk(last, False):
            ok.add(last)
        elif self._plain_chunk(last, True):
            self._ok_last.add(last)
        else:
            bad.add(last)
            return False
        return True

    def _fast(self, text: str) -> list[str] | None:
        if not text or text[0] in _WHITESPACE or text.encode().translate(None, _ALLOWED):
            return None
        chunks = text.split()
        if not self._ok.issuperset(chunks) and not self._validate(chunks):
            return None
        # In plain chunks "," and "." only end a chunk and "'" only starts "'s": split them off.
        return text.replace(",", " ,").replace(".", " .").replace("'s", " 's").split()

    def __call__(self, text: str) -> list[str]:
        toks = self._fast(text.lower())
        return toks if toks is not None else self.slow(text)
