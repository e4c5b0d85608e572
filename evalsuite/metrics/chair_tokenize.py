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
`TokenValidator` is the same test read off the tokens (`_chunk_tokens` of the whole caption, a few
byte checks and one memoised set of plain tokens), for the `original` variant's scorer, which needs
the tokens only (`chair.PatternMentions`): no `str.split` into chunks.
Anything else goes to `chair_normalize.Tokenizer` (NLTK's Punkt and Treebank, memoised), whose
Punkt break test answers a candidate context "W." + whitespace + token with a plain W from the same
tables (`FastTokenizer._sentbreak_test`, by the second point above).
`tests/unit/test_chair_tokenize.py` checks equality with `nltk.word_tokenize` on every golden
caption and on generated texts built to hit each branch.
"""
from __future__ import annotations

import re

_WORD = r"[a-z0-9]+(?:-[a-z0-9]+)*(?:'s)?"
_CHUNK = re.compile(rf"({_WORD})([.,]?)")
_CHUNKS = re.compile(rf"{_WORD}[.,]?(?: {_WORD}[.,]?)*")  # space-joined chunks, each a `_CHUNK`
_PLAIN_CONTEXT = re.compile(rf"({_WORD})\.\s+\S+")  # a Punkt candidate context "W." + whitespace + next token
_INITIAL_OR_NUMBER = re.compile(r"[a-z]|[0-9][0-9-]*")  # fullmatch: Punkt reads "W." as an initial/number
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
        # Punkt compiles its word and period-context regexes on first use: compile them now, while
        # loading, not inside the first caption that needs NLTK.
        lang = self.slow._punkt._lang_vars
        lang._word_tokenizer_re()
        lang.period_context_re()
        params = self.slow._punkt._params
        # Copies of the two Punkt tables `_is_plain_break` reads (the model is fixed once loaded).
        self._abbrev = frozenset(params.abbrev_types)
        self._colloc_firsts = frozenset(a for a, _ in params.collocations)
        self._ok: set[str] = set()        # plain chunks valid anywhere
        self._ok_last: set[str] = set()   # plain only as the caption's last chunk ("etc." at the end)
        self._bad: set[str] = set()       # chunks that send a caption to the slow path
        self.slow._punkt.text_contains_sentbreak = self._sentbreak_test(self.slow._punkt.text_contains_sentbreak)

    def _sentbreak_test(self, punkt_test):
        """Punkt's break test for the slow path: a candidate context "W." + whitespace + next token
        with W a plain word breaks if `_is_plain_break(W)` (the module docstring: whatever follows),
        read off the tables; any other context goes to `punkt_test` (Punkt's own, memoised)."""
        is_plain_break = self._is_plain_break

        def text_contains_sentbreak(context: str) -> bool:
            m = _PLAIN_CONTEXT.fullmatch(context)
            return (m is not None and is_plain_break(m.group(1))) or punkt_test(context)

        return text_contains_sentbreak

    def _is_plain_break(self, word: str) -> bool:
        r"""Punkt breaks after `word + "."` whatever token follows (see the module docstring).

        Punkt's own decision read off its tables instead of annotating a token: for a plain word W
        (`_WORD`), the first pass gives "W." `abbr` iff W or its last hyphen part is in
        `abbrev_types`, else `sentbreak` ("W." is no sentence-end character and holds one period,
        so no ellipsis); `is_initial` is `[^\W\d]\.$`, i.e. W is one letter; the type is
        "##number##" iff "W." fullmatches `-?[.,]?\d[\d,.-]*\.?`, i.e. W is `\d[\d-]*` (W has
        no "," or "."); otherwise `type_no_period` is W, checked against the collocation firsts.
        The unit tests compare this with `_annotate_first_pass` on every golden and generated word.
        """
        abbrev = self._abbrev
        return not (word in abbrev or word.rpartition("-")[2] in abbrev or word in self._colloc_firsts
                    or _INITIAL_OR_NUMBER.fullmatch(word))

    def _plain_chunk(self, chunk: str, last: bool) -> bool:
        m = _CHUNK.fullmatch(chunk)
        if m is None or _CONTRACTION.search(chunk) is not None:
            return False
        return m.group(2) != "." or last or self._is_plain_break(m.group(1))

    def _all_plain(self, new: set[str]) -> bool:
        """Every chunk of `new` plain mid-caption, checked at once: `_CHUNKS` fullmatches the
        space-joined set iff each chunk fullmatches `_CHUNK` (chunks hold no whitespace, and a
        contraction cannot span the joining space); then the "W." chunks' W must be plain breaks."""
        joined = " ".join(new)
        return (_CHUNKS.fullmatch(joined) is not None and _CONTRACTION.search(joined) is None
                and all(map(self._is_plain_break, [c[:-1] for c in new if c[-1] == "."])))

    def _validate(self, chunks: list[str], unseen: set[str] | None = None) -> bool:
        """Classify the chunks not seen before; True when every chunk is plain in its position.

        `unseen`, when the caller has it, is a subset of `set(chunks)` holding every chunk not in `_ok`.
        """
        ok, last = self._ok, chunks[-1]
        new = (set(chunks) if unseen is None else unseen).difference(ok)
        if not new.isdisjoint(self._bad):
            return False
        # the last chunk is judged on its own unless it also occurs earlier (`index` finds the first)
        alone = last in new and chunks.index(last) == len(chunks) - 1
        if alone:
            new.discard(last)
        if new:
            if not self._all_plain(new):
                self._bad.update(c for c in new if not self._plain_chunk(c, False))
                return False
            ok.update(new)
        if not alone or last in self._ok_last:
            return True
        if self._plain_chunk(last, False):
            ok.add(last)
        elif self._plain_chunk(last, True):
            self._ok_last.add(last)
        else:
            self._bad.add(last)
            return False
        return True

    @staticmethod
    def _allowed_chunks(text: str) -> list[str] | None:
        """`text.split()` if `text` holds only `_ALLOWED` characters and starts with no whitespace."""
        if not text or text[0] in _WHITESPACE or text.encode().translate(None, _ALLOWED):
            return None
        return text.split()

    def _fast(self, text: str) -> list[str] | None:
        chunks = self._allowed_chunks(text)
        if chunks is None or not self._ok.issuperset(chunks) and not self._validate(chunks):
            return None
        return _chunk_tokens(text)

    def __call__(self, text: str) -> list[str]:
        toks = self._fast(text.lower())
        return toks if toks is not None else self.slow(text)


_TOKEN = rb"[a-z0-9]+(?:-[a-z0-9]+)*"  # a plain chunk's word token (its "'s", "," or "." are tokens of their own)
_TOKENS = re.compile(rb"%s(?: %s)*" % (_TOKEN, _TOKEN))  # space-joined word tokens
_CONTRACTION_BYTES = re.compile(_CONTRACTION.pattern.encode())
_PUNCT_TOKENS = frozenset({b",", b".", b"'s"})
_TO_SPACE = bytes.maketrans(b"\t\n\r\f\v", b"     ")


# A "," "." or "'" that breaks the layout of plain chunks (whitespace mapped to spaces): a "," or
# "." followed by "," "." or "'"; any of the three starting a chunk; "'s" followed by "'s". The
# pattern starts with a character class, so `search` skips to those (rare) bytes at C speed.
_BAD_LAYOUT = re.compile(rb"[,.'](?:(?<=[,.])[,.']|(?<= [,.'])|(?<=')s's)")


def _plain_layout(b: bytes) -> bool:
    r"""Whether "," "." "'" sit in a caption as in plain chunks (see `TokenValidator`): `b` is the
    caption's bytes, all `_ALLOWED`, whitespace mapped to spaces, the first byte no space."""
    return b[:1] not in (b",", b".", b"'") and _BAD_LAYOUT.search(b) is None


class TokenValidator:
    """`FastTokenizer._fast` read off the tokens instead of the chunks: `layout_tokens(text)` is
    `_chunk_tokens(text.lower())` when that is plain, or None, if `words_plain` holds for its
    tokens (the caller memoises those), with no `str.split` into chunks.

    Why this is the chunk test. `_chunk_tokens` splits each chunk before every "," "." and "'s";
    take a chunk whose pieces are each a `_TOKEN` word or exactly "," "." or "'s". By `_plain_layout`
    it starts with none of "," "." "'", so its first piece is a word; a "," or "." piece is
    followed by no "," "." or "'s" piece (no "," or "." before "," "." "'"), so it ends the chunk;
    an "'s" piece is followed by no "'s" piece, so at most by one "," or "."; the chunk is
    word["'s"][","|"."], i.e. it fullmatches `_CHUNK`. Conversely a plain chunk has such pieces and
    layout. A MacIntyre contraction (letters only) lies inside one word piece. A mid-caption chunk
    "W." is a "." token other than the last token, W the token before it ("'s" included); the
    last chunk's final "." is always split off, as in `FastTokenizer._validate`.
    """

    def __init__(self, tokenizer: FastTokenizer) -> None:
        self._is_plain_break = tokenizer._is_plain_break
        self._breaks_ok: set[bytes] = set()  # W's with "W." a plain mid-caption chunk

    def layout_tokens(self, text: str) -> list[bytes] | None:
        """`_chunk_tokens(text.lower())`, as ASCII bytes, if `text.lower()` passes every test but
        the per-token one, else None. (Bytes: ASCII lowercasing and splitting on ASCII whitespace
        are cheaper than str's Unicode ones; a text with any non-ASCII character is refused, even
        one that `str.lower` makes ASCII, such as the Kelvin sign.)"""
        b = text.encode().lower()
        if not b or b.translate(None, _ALLOWED):
            return None
        b = b.translate(_TO_SPACE)
        if b[:1] == b" " or not _plain_layout(b):
            return None
        tokens = b.replace(b",", b" ,").replace(b".", b" .").replace(b"'s", b" 's").split()
        dots = b.count(b".")
        return tokens if not dots or self._breaks_plain(tokens, dots) else None

    def _breaks_plain(self, tokens: list[bytes], dots: int) -> bool:
        """Every "." token but a final one follows a W that Punkt always breaks after; `dots` is
        the text's count of "." (False, sending the text to NLTK, if not all are tokens: "3.5")."""
        if tokens[-1] == b".":
            dots -= 1  # the last chunk's final period is always split off
        ok, i = self._breaks_ok, -1
        try:
            for _ in range(dots):
                i = tokens.index(b".", i + 1)
                w = tokens[i - 1]
                if w == b"'s":
                    w = tokens[i - 2] + w
                if w not in ok:
                    if not self._is_plain_break(w.decode()):
                        return False
                    ok.add(w)
        except ValueError:
            return False
        return True

    @staticmethod
    def words_plain(new: set[bytes]) -> bool:
        """Whether the tokens `new` are all `_TOKEN` words without a contraction or `_PUNCT_TOKENS`
        (the words checked at once on their space-joined string, as `FastTokenizer._all_plain` does)."""
        joined = b" ".join([t for t in new if t not in _PUNCT_TOKENS])
        return not joined or (_TOKENS.fullmatch(joined) is not None and _CONTRACTION_BYTES.search(joined) is None)


def _chunk_tokens(text: str) -> list[str]:
    """Tokens of plain chunks: in them "," and "." only end a chunk and "'" only starts "'s"."""
    return text.replace(",", " ,").replace(".", " .").replace("'s", " 's").split()
