"""CHAIR object hallucination (Rohrbach et al. 2018): of the COCO objects a caption mentions, which
are not in the image.

Pipeline per caption (shared by all variants; only the normaliser and the GT set differ):
tokenise (`nltk.word_tokenize(lower)`) -> normalise each token -> merge two-word pairs -> toilet/seat
rule -> keep tokens that are vocabulary items -> compare their categories with GT(image).

Variants (`VARIANTS`):
  original     pattern singularisation for captions, pattern-built GT (the CHAIR paper's script; CSR)
  opera        POS + WordNet lemmas for captions, pattern-built GT (OPERA's script and numbers)
  opera_lemma  POS + WordNet lemmas for captions, lemma-built GT (the cache later repos ship)

The functions below are pure; `ChairScorer` only holds the loaded tokenizer/normaliser.
"""
from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress, count, filterfalse

from evalsuite.metrics.chair_vocab import ChairVocab, load_vocab
from evalsuite.metrics.stats import bootstrap_ci, safe_ratio


@dataclass(frozen=True)
class Variant:
    name: str
    normalizer: str   # how captions are normalised: "pattern" | "nltk_lemma"
    gt: str           # which GT normaliser built the GT: "pattern" | "nltk_lemma"


VARIANTS: dict[str, Variant] = {
    "original": Variant("original", "pattern", "pattern"),
    "opera": Variant("opera", "nltk_lemma", "pattern"),
    "opera_lemma": Variant("opera_lemma", "nltk_lemma", "nltk_lemma"),
}
DEFAULT_VARIANT = "original"
COUNT_KEYS = ("num_caps", "num_hallucinated_caps", "hallucinated_mentions", "coco_mentions",
              "recalled_gt", "total_gt", "total_tokens")


def get_variant(name: str) -> Variant:
    from evalsuite.errors import UserError

    if name not in VARIANTS:
        raise UserError(f"--variant: unknown CHAIR variant {name!r} (choose from {', '.join(VARIANTS)})")
    return VARIANTS[name]


def _positions(tokens: list[str], words) -> list[int]:
    """Sorted positions in `tokens` of any of `words` (C-level `list.index` scans, few words)."""
    out = []
    for word in words:
        i = -1
        try:
            while True:
                i = tokens.index(word, i + 1)
                out.append(i)
        except ValueError:
            pass
    out.sort()
    return out


def merge_pairs(tokens: list[str], vocab: ChairVocab) -> list[str]:
    """Left-to-right 2-gram merge: a pair in the table becomes its value and both tokens are consumed.

    Only positions holding a pair's first word can start a merge, so the scan visits those alone
    and copies the stretches between them.
    """
    return _merge_at(tokens, vocab.pair_firsts.intersection(tokens), vocab)


def _merge_at(tokens: list[str], firsts, vocab: ChairVocab) -> list[str]:
    """`merge_pairs` given `firsts`, the pair first words present in `tokens`."""
    if not firsts:
        return tokens
    pairs, n = vocab.pairs, len(tokens)
    out: list[str] = []
    done = 0  # tokens[:done] are emitted or consumed
    for i in _positions(tokens, firsts):
        if i < done or i + 1 >= n:
            continue
        merged = pairs.get(tokens[i] + " " + tokens[i + 1])
        if merged is not None:
            out += tokens[done:i]
            out.append(merged)
            done = i + 2
    if not done:
        return tokens
    out += tokens[done:]
    return out


def find_mentions(merged: list[str], vocab: ChairVocab) -> list[tuple[str, str, int]]:
    """(word, category, position in `merged`) of every vocabulary hit, in order, duplicates kept.

    Post-merge rules drop words first: with both "toilet" and "seat" present every "seat" goes
    ("the seat of the toilet" is not a chair).
    """
    return _mentions_of(merged, vocab.words.intersection(merged), vocab)


def _mentions_of(merged: list[str], hits, vocab: ChairVocab) -> list[tuple[str, str, int]]:
    """`find_mentions` given `hits`, the vocabulary words present in `merged`.

    A rule's "all present" test reads `hits` when every needed word is a vocabulary word (then
    present <=> hit), else `merged` itself; drops are decided on the hits before any is dropped.
    """
    if not hits:
        return []
    drop = [word for needed, word in vocab.remove_if_all
            if word in hits and needed.issubset(hits if needed <= vocab.words else merged)]
    if drop:
        hits = hits.difference(drop)
    w2c = vocab.word_to_category
    # one C-level pass marks the hits; compress keeps their positions in order
    return [(w, w2c[w], i) for i in compress(range(len(merged)), map(hits.__contains__, merged))
            for w in (merged[i],)]


def _sparse_mentions(tokens: list, positions: list[int], info: Mapping, singular: Mapping,
                     vocab: ChairVocab) -> tuple[list[tuple[str, str, int]], int]:
    """`merge_pairs` then `find_mentions`' hits (post-merge rules not applied) for a token-by-token
    normaliser, visiting only `positions`: the sorted positions of the raw `tokens` whose normal form
    is a vocabulary word or a pair first word. `info[token]` is (normal form, its category or None,
    whether it is a pair first word), `singular[token]` any token's normal form. Returns
    ((word, category, merged position) of each hit, merged length).

    Same left-to-right scan as `_merge_at`: a token consumed as a pair's second word is skipped, and
    every merge before a token shifts its merged position down by one. Tokens outside `positions`
    can neither start a merge nor be a hit, so they only count.
    """
    pairs, w2c = vocab.pairs, vocab.word_to_category
    n = len(tokens)
    hits: list[tuple[str, str, int]] = []
    done = shift = 0  # tokens[:done] are emitted or consumed; `shift` merges so far
    for i in positions:
        if i < done:
            continue
        form, cat, first = info[tokens[i]]
        at = i - shift
        if first and i + 1 < n:
            merged = pairs.get(form + " " + singular[tokens[i + 1]])
            if merged is not None:
                done, shift = i + 2, shift + 1
                form, cat = merged, w2c.get(merged)
        if cat is not None:
            hits.append((form, cat, at))
    return hits, n - shift


def _drop_by_rules(hits: list[tuple[str, str, int]], vocab: ChairVocab) -> list[tuple[str, str, int]]:
    """`_mentions_of`'s post-merge rules on `_sparse_mentions` hits, for rules whose needed words
    are all vocabulary words (then "all present in the merged tokens" <=> all among the hits)."""
    if not vocab.remove_if_all:
        return hits
    present = {h[0] for h in hits}
    drop = {word for needed, word in vocab.remove_if_all if word in present and needed <= present}
    return [h for h in hits if h[0] not in drop] if drop else hits


class PatternMentions:
    """`ChairScorer.mentions` for a token-by-token normaliser (pattern singularisation), given as
    `normalize_token` (one token -> its normal form).

    The caption's raw tokens are never normalised as a list: each distinct token is normalised once
    per scorer, and the tokens whose normal form is relevant (a vocabulary word or a pair first
    word) are kept in a set. A plain caption (`TokenValidator`) is then a few C-level byte checks,
    its tokens as bytes, a superset check (every token seen and plain), one C-level pass marking the
    relevant positions, and a Python loop over those few positions (`_sparse_mentions`); other
    captions take NLTK's tokens (`FastTokenizer.slow`). The memos start empty with each instance:
    filling them is first-sight work, done while scoring.
    """

    def __init__(self, tokenize, normalize_token, vocab: ChairVocab) -> None:
        from evalsuite.metrics.chair_tokenize import TokenValidator

        self.tokenize, self.normalize_token, self.vocab = tokenize, normalize_token, vocab
        self.validator = TokenValidator(tokenize)
        self._relevant_forms = vocab.words | vocab.pair_firsts
        self._singular: dict = {}             # raw token (bytes or str) -> normal form, every token seen
        self._plain: set[bytes] = set()       # seen tokens found plain (`TokenValidator.words_plain`)
        self._relevant: set = set()           # seen raw tokens whose normal form is relevant
        self._info: dict = {}                 # relevant raw token -> `_sparse_mentions` info

    def _learn(self, tokens, texts) -> None:
        """Normalise the `tokens` not seen before (`texts`: the same tokens as str) and note the
        relevant ones."""
        singular, normalize_token = self._singular, self.normalize_token
        relevant, w2c, firsts = self._relevant_forms, self.vocab.word_to_category, self.vocab.pair_firsts
        for token, text in zip(tokens, texts):
            if token not in singular:
                form = singular[token] = normalize_token(text)
                if form in relevant:
                    self._relevant.add(token)
                    self._info[token] = (form, w2c.get(form), form in firsts)

    def tokens(self, caption: str) -> list[bytes] | list[str]:
        """`nltk.word_tokenize(caption.lower())`, every token of it seen (normalised) afterwards; as
        ASCII bytes for a plain caption (`TokenValidator`), as str from NLTK. The memos hold both
        kinds of key (b"dog" != "dog"): a token's kind only decides which memo entry it reads."""
        tokens = self.validator.layout_tokens(caption)
        if tokens is not None:
            if self._plain.issuperset(tokens):
                return tokens
            new = set(filterfalse(self._plain.__contains__, tokens))
            if self.validator.words_plain(new):
                self._learn(new, map(bytes.decode, new))
                self._plain.update(new)
                return tokens
        tokens = self.tokenize.slow(caption)
        new = set(tokens)
        self._learn(new, new)
        return tokens

    def __call__(self, caption: str) -> tuple[list[tuple[str, str, int]], int]:
        tokens = self.tokens(caption)
        positions = list(compress(count(), map(self._relevant.__contains__, tokens)))
        if not positions:
            return [], len(tokens)
        hits, n = _sparse_mentions(tokens, positions, self._info, self._singular, self.vocab)
        return (_drop_by_rules(hits, self.vocab) if hits else hits), n


def score_caption(mentions: list[tuple[str, str, int]], gt: Iterable[str], n_tokens: int) -> dict:
    """The per-caption record: mentions, hallucinated ones, GT, recalled categories, CHAIRs/CHAIRi."""
    gt_set = gt if isinstance(gt, (set, frozenset)) else frozenset(gt)
    return _record(mentions, gt_set, sorted(gt_set), n_tokens, {})


def _record(mentions, gt_set, gt_sorted: list[str], n_tokens: int, rec: dict) -> dict:
    """`score_caption` into `rec` (which may already hold leading keys), GT sorted by the caller.

    One pass over the (few) mentions fills all four lists; each [word, category] is its own list.
    """
    pairs: list[list[str]] = []
    positions: list[int] = []
    hallucinated: list[list[str]] = []
    hallucinated_positions: list[int] = []
    for word, cat, pos in mentions:
        pairs.append([word, cat])
        positions.append(pos)
        if cat not in gt_set:
            hallucinated.append([word, cat])
            hallucinated_positions.append(pos)
    n_hall = len(hallucinated)
    rec["mentions"] = pairs
    rec["positions"] = positions
    rec["hallucinated"] = hallucinated
    rec["hallucinated_positions"] = hallucinated_positions
    rec["gt_objects"] = gt_sorted
    rec["recalled"] = sorted(gt_set.intersection([m[1] for m in mentions])) if mentions else []
    rec["n_tokens"] = n_tokens
    rec["CHAIRs"] = 1 if n_hall else 0
    rec["CHAIRi"] = safe_ratio(n_hall, len(pairs))
    return rec


def aggregate(records: list[dict]) -> dict:
    """Integer counts summed over captions and the micro-averaged CHAIRs, CHAIRi, Recall, Len."""
    c = dict.fromkeys(COUNT_KEYS, 0)
    c["num_caps"] = len(records)
    for r in records:
        c["num_hallucinated_caps"] += r["CHAIRs"]
        c["hallucinated_mentions"] += len(r["hallucinated"])
        c["coco_mentions"] += len(r["mentions"])
        c["recalled_gt"] += len(r["recalled"])
        c["total_gt"] += len(r["gt_objects"])
        c["total_tokens"] += r["n_tokens"]
    return {
        **c,
        "CHAIRs": safe_ratio(c["num_hallucinated_caps"], c["num_caps"]),
        "CHAIRi": safe_ratio(c["hallucinated_mentions"], c["coco_mentions"]),
        "Recall": safe_ratio(c["recalled_gt"], c["total_gt"]),
        "Len": safe_ratio(c["total_tokens"], c["num_caps"]),
    }


def _ratio_of_sums(rows):
    return safe_ratio(rows[:, 0].sum(), rows[:, 1].sum())


def chair_cis(records: list[dict], n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Percentile bootstrap CIs over captions for CHAIRs, CHAIRi and Recall (ratios resampled as pairs)."""
    import numpy as np

    cols = {
        "CHAIRs": [(r["CHAIRs"], 1) for r in records],
        "CHAIRi": [(len(r["hallucinated"]), len(r["mentions"])) for r in records],
        "Recall": [(len(r["recalled"]), len(r["gt_objects"])) for r in records],
    }
    return {
        name: list(bootstrap_ci(np.asarray(rows, dtype=float).reshape(-1, 2), _ratio_of_sums,
                                n_boot=n_boot, seed=seed, level=level))
        for name, rows in cols.items()
    }


class ChairScorer:
    """Tokeniser + normaliser + vocabulary of one variant; `mentions(caption)` is the hot path."""

    def __init__(self, variant: str = DEFAULT_VARIANT, vocab: ChairVocab | None = None) -> None:
        from evalsuite.metrics import chair_normalize as cn
        from evalsuite.metrics.chair_tokenize import FastTokenizer

        self.variant = get_variant(variant)
        self.vocab = vocab or load_vocab()
        self.tokenize = FastTokenizer()
        self._sparse: PatternMentions | None = None
        if self.variant.normalizer == "pattern":
            self.normalize = cn.PatternNormalizer()
            # singularisation maps each token on its own: normalise distinct tokens, not captions
            # (the sparse path reads post-merge rules off the hits, so their words must be vocabulary)
            if all(needed <= self.vocab.words for needed, _ in self.vocab.remove_if_all):
                self._sparse = PatternMentions(self.tokenize, cn.pattern_singularize, self.vocab)
        else:
            self.normalize = cn.LemmaNormalizer()  # POS tags need the whole caption
        # words a caption needs for any merge or mention: one intersection finds both kinds
        self._relevant = self.vocab.words | self.vocab.pair_firsts

    @property
    def resources(self) -> tuple[str, ...]:
        return self.normalize.resources

    def mentions(self, caption: str) -> tuple[list[tuple[str, str, int]], int]:
        """`find_mentions(merge_pairs(normalize(tokenize(caption))))` and the merged length: by
        `PatternMentions` for pattern singularisation; otherwise the pair firsts and the hits are
        read off one intersection (recomputed only after a merge)."""
        if self._sparse is not None:
            return self._sparse(caption)
        tokens, v = self.normalize(self.tokenize(caption)), self.vocab
        relevant = self._relevant.intersection(tokens)
        if not relevant:
            return [], len(tokens)
        merged = _merge_at(tokens, relevant.intersection(v.pair_firsts), v)
        hits = relevant.intersection(v.words) if merged is tokens else v.words.intersection(merged)
        return _mentions_of(merged, hits, v), len(merged)

    def score(self, caption: str, gt: Iterable[str]) -> dict:
        mentions, n_tokens = self.mentions(caption)
        return score_caption(mentions, gt, n_tokens)


def score_captions(scorer: ChairScorer, items: list[tuple[int, str]], gt: Mapping[int, Iterable[str]],
                   allow_missing: bool = False, source: str = "captions") -> list[dict]:
    """Score (image_id, caption) pairs. An image absent from GT is an error unless `allow_missing`,
    in which case it gets an empty GT (every mention hallucinated), as the reference scripts do.

    Each record equals `{"index": i, "image_id": id, **scorer.score(caption, gt[id])}`; an image's
    GT set and sorted list are made once per call (every record gets its own copy of the list)."""
    from evalsuite.errors import UserError

    missing = sorted({i for i, _ in items if i not in gt})
    if missing and not allow_missing:
        raise UserError(f"{source}: {len(missing)} image id(s) not in the GT (e.g. {missing[:5]}); "
                        "pass --allow-missing to count their mentions as hallucinated")
    empty: tuple[str, ...] = ()
    per_image: dict[int, tuple[frozenset[str] | set[str], list[str]]] = {}
    records = []
    with _gc_paused():
        for index, (image_id, caption) in enumerate(items):
            image_gt = per_image.get(image_id)
            if image_gt is None:
                g = gt.get(image_id, empty)
                g = g if isinstance(g, (set, frozenset)) else frozenset(g)
                image_gt = per_image[image_id] = (g, sorted(g))
            mentions, n_tokens = scorer.mentions(caption)
            records.append(_record(mentions, image_gt[0], image_gt[1].copy(), n_tokens,
                                   {"index": index, "image_id": image_id}))
    return records


@contextmanager
def _gc_paused():
    """No cyclic GC while scoring, and none owed for it afterwards.

    Records and memo entries hold no reference cycles, so the young-generation collections their
    allocations trigger (tens of thousands of containers per 1,500 captions; each one also walks
    whatever is young, such as a just-loaded GT) free nothing. With GC disabled the allocation count
    keeps growing, and re-enabling alone would make the next allocation collect it all at once;
    `freeze` then `unfreeze` instead moves every tracked object to the oldest generation and resets
    that count, traversing nothing. Full collections still see everything: a cycle made meanwhile
    (say inside NLTK) is freed by the next one instead of a young one.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def summarize(records: list[dict], variant: str, n_boot: int = 1000, seed: int = 0) -> dict:
    """The summary of a scored caption set: variant, integer counts, metrics and bootstrap CIs."""
    return {"variant": variant, **aggregate(records), "ci": chair_cis(records, n_boot=n_boot, seed=seed),
            "ci_level": 0.95, "n_boot": n_boot, "seed": seed}
