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
For a token-by-token normaliser (pattern singularisation) `ChunkMappedTokenizer` memoises the
normalised tokens per chunk instead, so a caption is one `split` and one C-level gather.
Anything else goes to `chair_normalize.Tokenizer` (NLTK's Punkt and Treebank, memoised).
`tests/unit/test_chair_tokenize.py` checks equality with `nltk.word_tokenize` on every golden
caption and on generated texts built to hit each branch.
"""
from __future__ import annotations

import re
from itertools import chain, islice

_WORD = r"[a-z0-9]+(?:-[a-z0-9]+)*(?:'s)?"
_CHUNK = re.compile(rf"({_WORD})([.,]?)")
_CHUNKS = re.compile(rf"{_WORD}[.,]?(?: {_WORD}[.,]?)*")  # space-joined chunks, each a `_CHUNK`
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


def _chunk_tokens(text: str) -> list[str]:
    """Tokens of plain chunks: in them "," and "." only end a chunk and "'" only starts "'s"."""
    return text.replace(",", " ,").replace(".", " .").replace("'s", " 's").split()


class ChunkMappedTokenizer:
    """`normalize(nltk.word_tokenize(text.lower()))` for a token-by-token `normalize`, memoised per chunk.

    On a plain caption the token list is the concatenation of its chunks' tokens (`_chunk_tokens`
    only inserts spaces inside a chunk, and "," "." "'s" hold no whitespace, so no split spans two
    chunks); a normaliser that maps each token on its own (pattern singularisation, no POS) then
    gives `memo[chunk] = tuple(normalize(chunk tokens))`, and the caption's normalised tokens are
    one C-level pass: `chain.from_iterable(map(memo.__getitem__, chunks))`. The memo holds only
    chunks plain in every position, so a full hit also proves the caption plain; a miss (an unseen
    chunk, or a last chunk plain only at the end) goes through `FastTokenizer._validate`. The memo
    starts empty with each instance: filling it is first-sight work, done while scoring.
    """

    def __init__(self, tokenizer: FastTokenizer, normalize) -> None:
        self.tokenizer = tokenizer
        self.normalize = normalize
        self._memo: dict[str, tuple[str, ...]] = {}       # chunk plain anywhere -> normalised tokens
        self._memo_last: dict[str, tuple[str, ...]] = {}  # plain only as the last chunk

    def _first_sight(self, chunks: list[str], unseen: set[str]) -> list[str]:
        """Memoise the `unseen` chunks (normalised in one call: `normalize` maps token by token, so
        the concatenation's result is the concatenation of the results), then assemble `chunks`."""
        memo, ok = self._memo, self.tokenizer._ok
        new = list(unseen)
        tokens = [_chunk_tokens(c) for c in new]
        flat = iter(self.normalize(list(chain.from_iterable(tokens))))
        for chunk, toks in zip(new, tokens):
            (memo if chunk in ok else self._memo_last)[chunk] = tuple(islice(flat, len(toks)))
        last = chunks[-1]
        if last in memo:
            return list(chain.from_iterable(map(memo.__getitem__, chunks)))
        out = list(chain.from_iterable(map(memo.__getitem__, chunks[:-1])))
        out += self._memo_last[last]
        return out

    def __call__(self, text: str) -> list[str]:
        chunks = self.tokenizer._allowed_chunks(text.lower())
        if chunks is not None:
            try:
                return list(chain.from_iterable(map(self._memo.__getitem__, chunks)))
            except KeyError:
                unseen = set(chunks).difference(self._memo)  # the memo only holds chunks in `_ok`
                if self.tokenizer._validate(chunks, unseen):
                    return self._first_sight(chunks, unseen)
        return self.normalize(self.tokenizer.slow(text))
