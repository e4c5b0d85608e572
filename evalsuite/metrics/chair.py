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

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass

from evalsuite.metrics.chair_vocab import ChairVocab, load_vocab
from evalsuite.metrics.stats import safe_ratio


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


def merge_pairs(tokens: list[str], pairs: Mapping[str, str], keep_single: bool = True,
                firsts: Container[str] | None = None) -> list[str]:
    """The released left-to-right two-word merge (CHAIR's and RLAIF-V's `caption_to_words`, RLAIF-V's
    `get_double_words_only` with keep_single=False): where `" ".join(tokens[i:i + 2])` is a key of `pairs`,
    emit its value and skip both tokens; else emit `tokens[i]` (nothing with keep_single=False).
    `firsts` (the keys' text before their first space) only skips lookups that cannot match, where every
    key holds a space and no token does (CHAIR's tokens): a speed hint, never another result."""
    n = len(tokens)
    out: list[str] = []
    i = 0
    while i < n:
        tok = tokens[i]
        if firsts is not None and tok not in firsts:
            merged = None
        else:
            merged = pairs.get(tok + " " + tokens[i + 1] if i + 1 < n else tok)
        if merged is None:
            if keep_single:
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


class ChairCounts:
    """The per-caption integers a summary needs, as compact arrays (4 bytes a value, 24 a caption): the
    sums give the aggregate, the columns the bootstrap CIs, and no record is kept."""

    FIELDS = ("CHAIRs", "hallucinated", "mentions", "recalled", "gt", "tokens")

    def __init__(self) -> None:
        from array import array

        self.cols = {f: array("i") for f in self.FIELDS}

    def add(self, record: dict) -> None:
        c = self.cols
        c["CHAIRs"].append(record["CHAIRs"])
        c["hallucinated"].append(len(record["hallucinated"]))
        c["mentions"].append(len(record["mentions"]))
        c["recalled"].append(len(record["recalled"]))
        c["gt"].append(len(record["gt_objects"]))
        c["tokens"].append(record["n_tokens"])

    def __len__(self) -> int:
        return len(self.cols["CHAIRs"])

    def aggregate(self) -> dict:
        """Integer counts summed over captions and the micro-averaged CHAIRs, CHAIRi, Recall, Len."""
        s = {f: sum(col) for f, col in self.cols.items()}
        c = {"num_caps": len(self), "num_hallucinated_caps": s["CHAIRs"], "hallucinated_mentions": s["hallucinated"],
             "coco_mentions": s["mentions"], "recalled_gt": s["recalled"], "total_gt": s["gt"],
             "total_tokens": s["tokens"]}
        return {
            **c,
            "CHAIRs": safe_ratio(c["num_hallucinated_caps"], c["num_caps"]),
            "CHAIRi": safe_ratio(c["hallucinated_mentions"], c["coco_mentions"]),
            "Recall": safe_ratio(c["recalled_gt"], c["total_gt"]),
            "Len": safe_ratio(c["total_tokens"], c["num_caps"]),
        }

    def cis(self, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
        """Percentile bootstrap CIs over captions for CHAIRs, CHAIRi and Recall, ratios resampled as pairs.

        The values of `stats.bootstrap_ci(rows, ratio of column sums)` per metric (the same generator
        draws, the same exact integer sums), computed with the replicates drawn a few at a time and
        turned into resample counts: memory stays O(captions), not O(captions x n_boot)."""
        import numpy as np

        n = len(self)
        ratios = {"CHAIRs": (0, None), "CHAIRi": (1, 2), "Recall": (3, 4)}
        if n == 0 or n_boot < 1:
            return {name: [float("nan"), float("nan")] for name in ratios}
        cols = np.stack([np.frombuffer(self.cols[f], dtype=np.int32) for f in
                         ("CHAIRs", "hallucinated", "mentions", "recalled", "gt")], axis=1).astype(np.float64)
        rng = np.random.default_rng(seed)
        stats = {name: np.empty(n_boot) for name in ratios}
        step = max(1, min(n_boot, (4 << 20) // n))  # ~32 MB of draws per step
        done = 0
        while done < n_boot:
            m = min(step, n_boot - done)
            idx = rng.integers(0, n, size=(m, n))
            idx += (np.arange(m) * n)[:, None]
            counts = np.bincount(idx.ravel(), minlength=m * n).reshape(m, n)
            del idx
            sums = counts @ cols  # (m, 5): exact integer sums (far below 2**53)
            for name, (num, den) in ratios.items():
                stats[name][done:done + m] = [safe_ratio(row[num], n if den is None else row[den]) for row in sums]
            done += m
        lo, hi = (1 - level) / 2 * 100, (1 + level) / 2 * 100
        return {name: [float(v) for v in np.nanpercentile(vals, [lo, hi])] for name, vals in stats.items()}


def counts_of(records: Iterable[dict]) -> ChairCounts:
    counts = ChairCounts()
    for r in records:
        counts.add(r)
    return counts


def aggregate(records: list[dict]) -> dict:
    """Integer counts summed over captions and the micro-averaged CHAIRs, CHAIRi, Recall, Len."""
    return counts_of(records).aggregate()


def chair_cis(records: list[dict], n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Percentile bootstrap CIs over captions for CHAIRs, CHAIRi and Recall (ratios resampled as pairs)."""
    return counts_of(records).cis(n_boot=n_boot, seed=seed, level=level)


class ChairScorer:
    """Tokeniser + normaliser + vocabulary of one variant, loaded once; `mentions(caption)` scores."""

    def __init__(self, variant: str = DEFAULT_VARIANT, vocab: ChairVocab | None = None,
                 tokenizer: str | None = None) -> None:
        from evalsuite.metrics import chair_normalize as cn
        from evalsuite.metrics.chair_tokenize import (
            DEFAULT_TOKENIZER,
            Tokenizer,
            get_tokenizer,
        )

        self.variant = get_variant(variant)
        self.tokenizer = get_tokenizer(tokenizer or DEFAULT_TOKENIZER)
        self.vocab = vocab or load_vocab()
        # the normaliser first: a missing tagger or WordNet is reported before anything else loads
        self.normalize = cn.PatternNormalizer() if self.variant.normalizer == "pattern" else cn.LemmaNormalizer()
        self.tokenize = Tokenizer(self.tokenizer)

    @property
    def resources(self) -> tuple[str, ...]:
        return self.normalize.resources

    def mentions(self, caption: str) -> tuple[list[tuple[str, str, int]], int]:
        """`find_mentions(merged)` and `len(merged)`, `merged` = `merge_pairs(normalize(tokenize(caption)))`."""
        merged = merge_pairs(self.normalize(self.tokenize(caption)), self.vocab.pairs, firsts=self.vocab.pair_firsts)
        return find_mentions(merged, self.vocab), len(merged)

    def score(self, caption: str, gt: Iterable[str], where: str = "caption") -> dict:
        """The per-caption record; NLTK's own regex time guard (a TimeoutError from its tokenizers) is
        a one-line error naming `where`, never a traceback."""
        from evalsuite.errors import UserError

        try:
            mentions, n_tokens = self.mentions(caption)
        except TimeoutError:
            raise UserError(f"{where}: NLTK's tokenizer gave up on this caption ({len(caption):,} characters) "
                            "at its regular-expression time limit; shorten or drop it") from None
        return score_caption(mentions, gt, n_tokens)


def check_missing(image_ids: Iterable[int], gt: Mapping[int, Iterable[str]], allow_missing: bool,
                  source: str) -> int:
    """How many captions have an image absent from GT; an error unless `allow_missing`."""
    from array import array

    from evalsuite.errors import UserError

    missing = array("q", (i for i in image_ids if i not in gt))  # 8 bytes a caption, not a set of ints
    if missing and not allow_missing:
        import numpy as np

        distinct = np.unique(np.frombuffer(missing, dtype=np.int64))
        raise UserError(f"{source}: {len(distinct)} image id(s) not in the GT (e.g. {distinct[:5].tolist()}); "
                        "pass --allow-missing to count their mentions as hallucinated")
    return len(missing)


def score_captions(scorer: ChairScorer, items: list[tuple[int, str]], gt: Mapping[int, Iterable[str]],
                   allow_missing: bool = False, source: str = "captions") -> list[dict]:
    """`{"index": i, "image_id": id, **scorer.score(caption, gt[id])}` per (image_id, caption). An image
    absent from GT is an error unless `allow_missing`, in which case it gets an empty GT (every
    mention hallucinated), as the reference scripts do."""
    check_missing((i for i, _ in items), gt, allow_missing, source)
    return [{"index": index, "image_id": image_id,
             **scorer.score(caption, gt.get(image_id, ()), f"{source}: caption {index}")}
            for index, (image_id, caption) in enumerate(items)]


def summarize(records: list[dict] | ChairCounts, variant: str, n_boot: int = 1000, seed: int = 0) -> dict:
    """The summary of a scored caption set: variant, integer counts, metrics and bootstrap CIs."""
    counts = records if isinstance(records, ChairCounts) else counts_of(records)
    return {"variant": variant, **counts.aggregate(), "ci": counts.cis(n_boot=n_boot, seed=seed),
            "ci_level": 0.95, "n_boot": n_boot, "seed": seed}
