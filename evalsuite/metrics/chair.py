"""CHAIR object hallucination (Rohrbach et al. 2018): of the COCO objects a caption mentions, which
are not in the image.

Per caption, the reference scripts' pipeline step for step (only the normaliser and the GT set
differ between variants): `nltk.word_tokenize(caption.lower())` -> normalise each token -> merge
two-word pairs -> toilet/seat rule -> keep vocabulary items -> compare their categories with GT.
Speed comes from per-word memos (chair_normalize.py) and two exact shortcuts that hand what they
cannot prove to NLTK: plain sentences' Treebank step (chair_tokenize.py), tagging (chair_tagger.py).

Variants (`VARIANTS`):
  original     pattern singularisation for captions, pattern-built GT (the CHAIR paper's script; CSR)
  opera        POS + WordNet lemmas for captions, pattern-built GT (OPERA's script and numbers)
  opera_lemma  POS + WordNet lemmas for captions, lemma-built GT (the cache later repos ship)
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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


def merge_pairs(tokens: list[str], vocab: ChairVocab) -> list[str]:
    """The reference's left-to-right 2-gram merge: where `tokens[i] + " " + tokens[i + 1]` is in the
    pair table, emit its value and skip both tokens; else emit `tokens[i]`."""
    pairs, firsts, n = vocab.pairs, vocab.pair_firsts, len(tokens)
    out: list[str] = []
    i = 0
    while i < n:
        tok = tokens[i]
        merged = pairs.get(tok + " " + tokens[i + 1]) if tok in firsts and i + 1 < n else None
        if merged is None:
            out.append(tok)
            i += 1
        else:
            out.append(merged)
            i += 2
    return out


def find_mentions(merged: list[str], vocab: ChairVocab) -> list[tuple[str, str, int]]:
    """(word, category, position in `merged`) of every vocabulary hit, in order, duplicates kept.

    Post-merge rules drop words first: with both "toilet" and "seat" present every "seat" goes
    ("the seat of the toilet" is not a chair).
    """
    w2c = vocab.word_to_category
    present = set(merged)
    drop = {word for needed, word in vocab.remove_if_all if needed <= present}
    return [(w, w2c[w], i) for i, w in enumerate(merged) if w in w2c and w not in drop]


def score_caption(mentions: list[tuple[str, str, int]], gt: Iterable[str], n_tokens: int) -> dict:
    """The per-caption record: mentions, hallucinated ones, GT, recalled categories, CHAIRs/CHAIRi."""
    gt_set = frozenset(gt)
    hallucinated = [m for m in mentions if m[1] not in gt_set]
    return {
        "mentions": [[w, c] for w, c, _ in mentions], "positions": [p for _, _, p in mentions],
        "hallucinated": [[w, c] for w, c, _ in hallucinated],
        "hallucinated_positions": [p for _, _, p in hallucinated],
        "gt_objects": sorted(gt_set), "recalled": sorted(gt_set.intersection([c for _, c, _ in mentions])),
        "n_tokens": n_tokens, "CHAIRs": 1 if hallucinated else 0,
        "CHAIRi": safe_ratio(len(hallucinated), len(mentions)),
    }


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
    """Tokeniser + normaliser + vocabulary of one variant, loaded once; `mentions(caption)` scores."""

    def __init__(self, variant: str = DEFAULT_VARIANT, vocab: ChairVocab | None = None) -> None:
        from evalsuite.metrics import chair_normalize as cn
        from evalsuite.metrics.chair_tokenize import Tokenizer

        self.variant = get_variant(variant)
        self.vocab = vocab or load_vocab()
        # the normaliser first: a missing tagger or WordNet is reported before anything else loads
        self.normalize = cn.PatternNormalizer() if self.variant.normalizer == "pattern" else cn.LemmaNormalizer()
        self.tokenize = Tokenizer()

    @property
    def resources(self) -> tuple[str, ...]:
        return self.normalize.resources

    def mentions(self, caption: str) -> tuple[list[tuple[str, str, int]], int]:
        """`find_mentions(merged)` and `len(merged)`, `merged` = `merge_pairs(normalize(tokenize(caption)))`."""
        merged = merge_pairs(self.normalize(self.tokenize(caption)), self.vocab)
        return find_mentions(merged, self.vocab), len(merged)

    def score(self, caption: str, gt: Iterable[str]) -> dict:
        mentions, n_tokens = self.mentions(caption)
        return score_caption(mentions, gt, n_tokens)


def score_captions(scorer: ChairScorer, items: list[tuple[int, str]], gt: Mapping[int, Iterable[str]],
                   allow_missing: bool = False, source: str = "captions") -> list[dict]:
    """`{"index": i, "image_id": id, **scorer.score(caption, gt[id])}` per (image_id, caption). An image
    absent from GT is an error unless `allow_missing`, in which case it gets an empty GT (every
    mention hallucinated), as the reference scripts do."""
    from evalsuite.errors import UserError

    missing = sorted({i for i, _ in items if i not in gt})
    if missing and not allow_missing:
        raise UserError(f"{source}: {len(missing)} image id(s) not in the GT (e.g. {missing[:5]}); "
                        "pass --allow-missing to count their mentions as hallucinated")
    return [{"index": index, "image_id": image_id, **scorer.score(caption, gt.get(image_id, ()))}
            for index, (image_id, caption) in enumerate(items)]


def summarize(records: list[dict], variant: str, n_boot: int = 1000, seed: int = 0) -> dict:
    """The summary of a scored caption set: variant, integer counts, metrics and bootstrap CIs."""
    return {"variant": variant, **aggregate(records), "ci": chair_cis(records, n_boot=n_boot, seed=seed),
            "ci_level": 0.95, "n_boot": n_boot, "seed": seed}
