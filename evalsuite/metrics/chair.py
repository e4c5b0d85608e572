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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import compress

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


def score_caption(mentions: list[tuple[str, str, int]], gt: Iterable[str], n_tokens: int) -> dict:
    """The per-caption record: mentions, hallucinated ones, GT, recalled categories, CHAIRs/CHAIRi."""
    gt_set = gt if isinstance(gt, (set, frozenset)) else frozenset(gt)
    return _record(mentions, gt_set, sorted(gt_set), n_tokens, {})


def _record(mentions, gt_set, gt_sorted: list[str], n_tokens: int, rec: dict) -> dict:
    """`score_caption` into `rec` (which may already hold leading keys), GT sorted by the caller."""
    if mentions:
        words, cats, positions = zip(*mentions)
        pairs = list(zip(words, cats))
        is_hall = [c not in gt_set for c in cats]
        hallucinated = list(compress(pairs, is_hall))
        n_hall = len(hallucinated)
        rec["mentions"] = list(map(list, pairs))
        rec["positions"] = list(positions)
        rec["hallucinated"] = list(map(list, hallucinated))
        rec["hallucinated_positions"] = list(compress(positions, is_hall))
        rec["gt_objects"] = gt_sorted
        rec["recalled"] = sorted(gt_set.intersection(cats))
    else:
        n_hall = 0
        rec.update(mentions=[], positions=[], hallucinated=[], hallucinated_positions=[],
                   gt_objects=gt_sorted, recalled=[])
    rec["n_tokens"] = n_tokens
    rec["CHAIRs"] = 1 if n_hall else 0
    rec["CHAIRi"] = safe_ratio(n_hall, len(mentions))
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
        from evalsuite.metrics.chair_tokenize import ChunkMappedTokenizer, FastTokenizer

        self.variant = get_variant(variant)
        self.vocab = vocab or load_vocab()
        self.tokenize = FastTokenizer()
        if self.variant.normalizer == "pattern":
            self.normalize = cn.PatternNormalizer()
            # singularisation maps each token on its own, so it can be memoised per chunk
            self._tokens = ChunkMappedTokenizer(self.tokenize, self.normalize)
        else:
            self.normalize = cn.LemmaNormalizer()  # POS tags need the whole caption
            self._tokens = lambda caption: self.normalize(self.tokenize(caption))
        # words a caption needs for any merge or mention: one intersection finds both kinds
        self._relevant = self.vocab.words | self.vocab.pair_firsts

    @property
    def resources(self) -> tuple[str, ...]:
        return self.normalize.resources

    def mentions(self, caption: str) -> tuple[list[tuple[str, str, int]], int]:
        """`find_mentions(merge_pairs(normalize(tokenize(caption))))` and the merged length; the
        pair firsts and the hits are read off one intersection (recomputed only after a merge)."""
        tokens, v = self._tokens(caption), self.vocab
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


def summarize(records: list[dict], variant: str, n_boot: int = 1000, seed: int = 0) -> dict:
    """The summary of a scored caption set: variant, integer counts, metrics and bootstrap CIs."""
    return {"variant": variant, **aggregate(records), "ci": chair_cis(records, n_boot=n_boot, seed=seed),
            "ci_level": 0.95, "n_boot": n_boot, "seed": seed}
