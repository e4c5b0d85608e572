"""`FastPerceptronTagger`: NLTK's `PerceptronTagger.tag`, tag for tag, ~10x faster on captions.

NLTK's tagger builds 14 feature strings per token and sums dict-of-dict weights in pure Python
(nltk/tag/perceptron.py: `tag`, `_get_features`, `AveragedPerceptron.predict`). Here the same
weights sit in a dense numpy matrix [feature, class], and a caption is scored in two steps:

* the 10 tag-independent features of every token the tagdict does not decide (bias, i suffix,
  i pref1, i word, and the words/suffixes of the 4 neighbours) are gathered and summed for the
  whole caption at once (each distinct token's feature rows are looked up once, ever);
* left to right (greedy, as NLTK: a guess is the next token's "prev"), the 4 tag-dependent ones
  (i-1 tag, i-2 tag, i tag+i-2 tag, i-1 tag+i word), memoised per (prev, prev2, token), are added
  and the argmax taken.

Exactness: the float addition order differs from NLTK's, so a score may differ from NLTK's in
its last bits. Both are sums of the same 14 weights (each feature's value is 1: the templates'
names are prefix-free, so no two features share a key), and any order of summing 14 terms is
within 13 * 2**-53 / (1 - 13 * 2**-53) * sum|terms| < 1.5e-15 * S of the real sum, where
S = 14 * max|weight|. So where the best class leads every other one by more than `tol`
(1e-9 * S, far above twice that), it is NLTK's strict winner too. Where some token of a caption
does not (a near-tie, or a real tie that NLTK breaks by label order), the whole caption is tagged
by NLTK's own `tag`, so a changed tag reaches the tokens after it. The tagdict shortcut, START/END
padding and `normalize` are NLTK's own. `tests/unit/test_chair_tagger.py` checks equality on
every golden caption plus edge cases.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# the caption and tag-part memos are emptied when they reach this many entries (a memory bound)
MEMO_LIMIT = 1 << 20


def _dense_weights(weights: dict, classes: tuple[str, ...]):
    """(feature -> row, float64 matrix [feature, class]) of the model's weights, 0 where a feature
    has no weight for a class, plus a last all-zero row that stands for an unknown feature.
    Labels outside `classes` are dropped: NLTK's argmax never sees them."""
    import numpy as np

    n = len(classes)
    index = {c: j for j, c in enumerate(classes)}
    row: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for r, (feature, ws) in enumerate(weights.items()):
        row[feature] = r
        rows += [r] * len(ws)
        cols += [index.get(label, n) for label in ws]  # column n: the dropped labels
        vals += ws.values()
    full = np.zeros((len(row) + 1, n + 1))
    full[rows, cols] = vals
    return row, np.ascontiguousarray(full[:, :n])


class FastPerceptronTagger:
    """Wraps a loaded `nltk.tag.perceptron.PerceptronTagger`; `tags(tokens)` is the hot path."""

    def __init__(self, tagger) -> None:
        import numpy as np

        self._np = np
        self._nltk = tagger
        self._tagdict = tagger.tagdict
        self.classes = tuple(sorted(tagger.model.classes))
        self._row, self._matrix = _dense_weights(tagger.model.weights, self.classes)
        self._zero = len(self._matrix) - 1
        # 14 terms per score, each at most max|w| in size: see the module docstring
        self.tol = 1e-9 * 14 * float(abs(self._matrix).max(initial=0.0))
        self._start = tuple(tagger.START)
        self.fallbacks = 0  # captions tagged by NLTK's own code (a near-tie in one of their tokens)
        # token -> id, a row of `_table`: the rows of the 10 tag-independent features that token
        # gives itself and its neighbours. Ids 0-3: the padding, which enters NLTK's context as is
        # (not normalised) and whose own word features are never read.
        self._ids: dict[str, int] = {}
        self._table = np.empty((1024, 10), dtype=np.intp)
        pads = (*tagger.START, *tagger.END)
        self._table[:len(pads)] = [(self._zero,) * 4 + self._neighbour_rows(c) for c in pads]
        self._size = len(pads)
        self._pairs: dict[tuple[str, str], object] = {}  # (prev, prev2) -> vector
        self._tagpart: dict[tuple[str, str, str], object] = {}  # (prev, prev2, token) -> vector
        self._captions: dict[tuple[str, ...], tuple[str, ...]] = {}

    def _neighbour_rows(self, c: str) -> tuple[int, ...]:
        """Rows of the features context word c gives its neighbours: as i-1 (word, suffix), as i-2,
        as i+1 (word, suffix), as i+2."""
        get, z = self._row.get, self._zero
        return (get("i-1 word " + c, z), get("i-1 suffix " + c[-3:], z), get("i-2 word " + c, z),
                get("i+1 word " + c, z), get("i+1 suffix " + c[-3:], z), get("i+2 word " + c, z))

    def _add_token(self, word: str) -> int:
        get, z = self._row.get, self._zero
        c = self._nltk.normalize(word)
        if self._size == len(self._table):
            self._table = self._np.concatenate([self._table, self._np.empty_like(self._table)])
        self._table[self._size] = (get("bias", z), get("i suffix " + word[-3:], z),
                                   get("i pref1 " + (word[0] if word else ""), z), get("i word " + c, z),
                                   *self._neighbour_rows(c))
        tid = self._ids[word] = self._size
        self._size += 1
        return tid

    def _tag_vector(self, prev: str, prev2: str, word: str):
        """Sum of the 4 tag-dependent features' weight vectors (unknown ones add nothing)."""
        get, z = self._row.get, self._zero
        pair = self._pairs.get((prev, prev2))
        if pair is None:
            rows = [get("i-1 tag " + prev, z), get("i-2 tag " + prev2, z), get(f"i tag+i-2 tag {prev} {prev2}", z)]
            pair = self._pairs[(prev, prev2)] = self._matrix[rows].sum(axis=0)
        if len(self._tagpart) >= MEMO_LIMIT:
            self._tagpart.clear()
        c = self._nltk.normalize(word)
        v = self._tagpart[(prev, prev2, word)] = pair + self._matrix[get(f"i-1 tag+i word {prev} {c}", z)]
        return v

    def _window_scores(self, tokens: tuple[str, ...], todo: list[int]):
        """[len(todo), classes] sums of the 10 tag-independent features of the tokens at `todo`."""
        np = self._np
        get = self._ids.get
        ids = [get(w) or self._add_token(w) for w in tokens]  # token ids start at 4: never falsy
        rows = self._table[[0, 1, *ids, 2, 3]]
        at = np.array(todo) + 2  # the token's index in the padded context
        cols = np.empty((len(todo), 10), dtype=np.intp)
        cols[:, :4] = rows[at, :4]        # bias, i suffix, i pref1, i word
        cols[:, 4:6] = rows[at - 1, 4:6]  # i-1 word, i-1 suffix
        cols[:, 6] = rows[at - 2, 6]      # i-2 word
        cols[:, 7:9] = rows[at + 1, 7:9]  # i+1 word, i+1 suffix
        cols[:, 9] = rows[at + 2, 9]      # i+2 word
        return self._matrix[cols].sum(axis=1)

    def tags(self, tokens) -> tuple[str, ...]:
        """The Penn tags `PerceptronTagger.tag(tokens)` gives, in order."""
        key = tuple(tokens)
        out = self._captions.get(key)
        if out is not None:
            return out
        # padded: tags[i + 2] is token i's; NLTK starts with prev = START[0], prev2 = START[1]
        tags = [self._start[1], self._start[0]] + list(map(self._tagdict.get, key))
        todo = [i for i, t in enumerate(tags[2:]) if not t]  # NLTK also predicts on an empty entry
        if todo:
            scores = self._window_scores(key, todo)
            best = self._np.empty(len(todo), dtype=self._np.intp)
            classes, tagpart = self.classes, self._tagpart
            for k, i in enumerate(todo):  # greedy, left to right: a guess is the next token's prev
                prev, prev2 = tags[i + 1], tags[i]
                v = tagpart.get((prev, prev2, key[i]))
                s = scores[k]
                s += v if v is not None else self._tag_vector(prev, prev2, key[i])
                j = best[k] = s.argmax()
                tags[i + 2] = classes[j]
            # every guess must beat the runner-up by more than the rounding bound; else NLTK decides
            top = scores[self._np.arange(len(todo)), best]
            if self._np.count_nonzero(scores > (top - self.tol)[:, None]) != len(todo):
                self.fallbacks += 1
                tags[2:] = [t for _, t in self._nltk.tag(list(key))]
        if len(self._captions) >= MEMO_LIMIT:
            self._captions.clear()
        out = self._captions[key] = tuple(tags[2:])
        return out

    def tag(self, tokens) -> list[tuple[str, str]]:
        """Same value as `PerceptronTagger.tag(tokens)`: [(token, tag), ...]."""
        return list(zip(tokens, self.tags(tokens)))
