"""CHAIR scoring speed per variant: evalsuite's scorer next to the reference scripts' scoring loop.

    python bench/chair_speed.py [--golden ../shared/golden/chair] [--variants original,opera,opera_lemma]
        [--repeat N]

On the 1,500 golden LLaVA-1.5 captions (greedy + beam5 + opera), per variant:
* "reference": the reference scripts' per-caption loop, restated here (bench only) with the same
  calls in the same order and nothing memoised: `caption_to_words` of LisaAnne/Hallucination
  `utils/chair.py` (original; pattern's `singularize` is evalsuite's re-statement of it, unmemoised)
  or of OPERA's `chair.py` (opera variants: `nltk.pos_tag`, a `WordNetLemmatizer` per caption,
  `lemmatize` per token), then `compute_chair`'s comparison with GT;
* "evalsuite": `score_captions` on a fresh `ChairScorer` with emptied word memos (the first pass a
  real evaluation pays), and a second pass over warm memos.
Models are loaded (and WordNet warmed up) before either is timed. The mentions and token counts of
the two loops are compared caption by caption, and the ratio is judged against the >= 5x target.
With `--repeat N` both loops run N times, alternating; the medians are reported.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

DEFAULT_GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "golden" / "chair"
TARGET_RATIO = 5.0
GT_FILES = {"pattern": "gt_objects_coco2014_pattern.json.gz", "nltk_lemma": "gt_objects_coco2014_nltk_lemma.json.gz"}


def _captions(golden: Path) -> list[tuple[int, str]]:
    items = []
    for name in ("greedy", "beam5", "opera"):
        for line in (golden / "captions" / "llava-1.5" / f"{name}.jsonl").read_text().splitlines():
            d = json.loads(line)
            items.append((d["image_id"], d["caption"]))
    return items


def reference_singularize(word: str) -> str:
    """pattern 3.6 `singularize` in its own shape: a Python loop over each table in turn, as the
    CHAIR paper's script ran it (evalsuite's `pattern_singularize` gives the same values; it is
    checked on every golden token by tests/golden)."""
    from evalsuite.metrics.chair_normalize import _pattern_tables

    t = _pattern_tables()
    if "-" in word:
        parts = word.split("-")
        if len(parts) > 1 and parts[1] in t["prepositions"]:
            return reference_singularize(parts[0]) + "-" + "-".join(parts[1:])
    if word.endswith("'"):
        return reference_singularize(word[:-1]) + "'s"
    lower = word.lower()
    for w in t["kept"]:
        if w.endswith(lower):
            return word
    for w in t["ie"]:
        if lower.endswith(w):
            return lower
    for w in t["s"]:
        if lower.endswith(w):
            return lower[:-2]
    for w, _, singular in t["irregular"]:
        if lower.endswith(w):
            return re.sub("(?i)" + w + "$", singular, word)
    for suffix, inflection in t["rules"]:
        m = suffix.search(word)
        if m:
            for k, g in enumerate(m.groups()):
                if g is None:
                    inflection = inflection.replace("\\" + str(k + 1), "")
            return suffix.sub(inflection, word)
    return word


class ReferenceLoop:
    """The reference `caption_to_words` + `compute_chair` loop, call for call (no memo anywhere)."""

    def __init__(self, normalizer: str) -> None:
        import nltk

        from evalsuite.metrics.chair_vocab import load_vocab

        v = load_vocab()
        self.nltk, self.lemma = nltk, normalizer == "nltk_lemma"
        self.double_word_dict = v.pairs
        self.mscoco_objects = list(v.word_to_category)  # the reference keeps a list, turned into a set per word
        self.inverse_synonym_dict = v.word_to_category
        if self.lemma:
            from nltk.corpus import wordnet
            from nltk.stem import WordNetLemmatizer

            self.wordnet, self.wnl_class = wordnet, WordNetLemmatizer
            nltk.pos_tag(["warm", "up"])  # loads the tagger (NLTK keeps it) and WordNet, untimed
            WordNetLemmatizer().lemmatize("dogs")

    def get_wordnet_pos(self, tag: str):
        wn = self.wordnet
        return {"J": wn.ADJ, "V": wn.VERB, "N": wn.NOUN, "R": wn.ADV}.get(tag[:1])

    def caption_to_words(self, caption: str):
        words = self.nltk.word_tokenize(caption.lower())
        if self.lemma:
            wnl = self.wnl_class()
            words = [wnl.lemmatize(w, pos=self.get_wordnet_pos(t) or self.wordnet.NOUN)
                     for w, t in self.nltk.pos_tag(words)]
        else:
            words = [reference_singularize(w) for w in words]
        i, double_words, idxs = 0, [], []
        while i < len(words):
            idxs.append(i)
            double_word = " ".join(words[i:i + 2])
            if double_word in self.double_word_dict:
                double_words.append(self.double_word_dict[double_word])
                i += 2
            else:
                double_words.append(words[i])
                i += 1
        words = double_words
        if ("toilet" in words) & ("seat" in words):
            words = [word for word in words if word != "seat"]
        if self.lemma:  # OPERA also maps the hits back to raw positions, with a set per word again
            idxs = [idxs[k] for k, word in enumerate(words) if word in set(self.mscoco_objects)]
        words = [word for word in words if word in set(self.mscoco_objects)]
        return words, [self.inverse_synonym_dict[w] for w in words], double_words

    def score(self, items, gt) -> list[tuple]:
        out = []
        for imid, cap in items:
            words, node_words, raw_words = self.caption_to_words(cap)
            gt_objects = gt[imid]
            hallucinated = [(w, n) for w, n in zip(words, node_words) if n not in gt_objects]
            out.append((list(zip(words, node_words)), hallucinated, len(raw_words)))
        return out


def _ours(variant: str, items, gt):
    """(seconds of a first pass on a fresh scorer with emptied word memos, second pass, records)."""
    from evalsuite.metrics import chair
    from evalsuite.metrics.chair_normalize import pattern_singularize

    pattern_singularize.cache_clear()
    scorer = chair.ChairScorer(variant)
    t0 = time.perf_counter()
    records = chair.score_captions(scorer, items, gt)
    t1 = time.perf_counter()
    chair.score_captions(scorer, items, gt)
    return t1 - t0, time.perf_counter() - t1, records


def bench_variant(variant: str, golden: Path, items, repeat: int) -> dict:
    from evalsuite.metrics import chair
    from evalsuite.metrics.chair_gt import load_gt

    gt, _ = load_gt(golden / "gt" / GT_FILES[chair.VARIANTS[variant].gt])
    t0 = time.perf_counter()
    chair.ChairScorer(variant)  # the first load pays the one-off imports and model loads
    load_s = time.perf_counter() - t0
    ref = ReferenceLoop(chair.VARIANTS[variant].normalizer)
    ref_s, first_s, second_s = [], [], []
    for _ in range(repeat):
        t = time.perf_counter()
        expected = ref.score(items, gt)
        ref_s.append(time.perf_counter() - t)
        first, second, records = _ours(variant, items, gt)
        first_s.append(first)
        second_s.append(second)
    got = [([tuple(m) for m in r["mentions"]], [tuple(h) for h in r["hallucinated"]], r["n_tokens"])
           for r in records]
    n = len(items)
    return {"variant": variant, "captions": n, "load_s": load_s, "identical": got == expected,
            "ref": n / statistics.median(ref_s), "first": n / statistics.median(first_s),
            "second": n / statistics.median(second_s)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--golden", type=Path, default=DEFAULT_GOLDEN)
    ap.add_argument("--variants", default="original,opera,opera_lemma")
    ap.add_argument("--repeat", type=int, default=1, help="run both loops N times, alternating (medians)")
    args = ap.parse_args()
    if not (args.golden / "captions").is_dir():
        print(f"chair_speed.py: error: --golden {args.golden}: no CHAIR golden data there", file=sys.stderr)
        return 2
    items = _captions(args.golden)
    print(f"{'variant':<12} {'caps':>5} {'load s':>7} {'reference caps/s':>17} {'evalsuite 1st':>14} "
          f"{'2nd':>7} {'ratio 1st':>10} {'identical':>10}")
    for variant in args.variants.split(","):
        r = bench_variant(variant, args.golden, items, max(1, args.repeat))
        ratio = r["first"] / r["ref"]
        print(f"{variant:<12} {r['captions']:>5} {r['load_s']:>7.2f} {r['ref']:>17.0f} {r['first']:>14.0f} "
              f"{r['second']:>7.0f} {ratio:>9.1f}x {r['identical']!s:>10}")
        print(f"  target >= {TARGET_RATIO:.0f}x the reference loop (1st pass): "
              f"{'met' if ratio >= TARGET_RATIO else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
