"""`FastPerceptronTagger` gives exactly `nltk.tag.perceptron.PerceptronTagger.tag`'s tags.

On the official English model (tests/data/golden/nltk_data): every golden
caption, whole and sentence by sentence, the COCO reference captions, seeded shuffles of the
golden captions' tokens (contexts no caption has) and hand-picked edge cases. On hand-made
models: a clear win worked out by hand, an exact tie and a case where float order decides.
"""
from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "chair"

EDGE_CASES = [
    [],
    ["dog"],
    ["The"],
    [""],
    ["a", "", "dog"],
    ["1999", "2024", "12", "3.5", "1,000", "42nd", "0"],
    ["in", "1999", ",", "a", "12-year-old", "boy", "ate", "3", "apples", "."],
    ["well-known", "-", "--", "-foo", "foo-", "a-b-c", "x-1"],
    ["COVID-19", "Mr.", "U.S.", "e.g.", "'s", "n't", "''", "``"],
    ["zxqv", "blorptastic", "quuxes", "frobnicated", "snarfily"],
    ["café", "naïve", "Ελλάδα", "東京", "émigré"],
    ["dog"] * 40,
    ["run", "run", "run"],
    ["-START-", "-END-", "-START2-", "-END2-", "bias"],
    ["a dog", "two  words", " ", "\t", "\n"],
    ["the", "the", "the", "the"],
    ["."] * 5 + ["?", "!", ";", ":", "(", ")", "[", "]"],
]


@pytest.fixture(scope="module")
def taggers(nltk_models_dir):
    """(NLTK's tagger, the fast one over its model), from the official tables."""
    from nltk.tag.perceptron import PerceptronTagger

    from evalsuite.metrics import nltk_resources
    from evalsuite.metrics.chair_tagger import FastPerceptronTagger

    nltk_resources.add_data_dir(nltk_models_dir)
    slow = PerceptronTagger()
    return slow, FastPerceptronTagger(slow)


def _golden_texts() -> list[str]:
    texts = []
    for path in sorted((GOLDEN / "captions").rglob("*.jsonl")):
        texts += [json.loads(line)["caption"] for line in path.read_text().splitlines() if line.strip()]
    outputs = json.loads((GOLDEN / "captions" / "maxlinn_example" / "outputs.json").read_text())
    texts += [s["caption"] for s in outputs["sentences"]]
    coco = json.loads((GOLDEN / "coco_val2014_80" / "captions.json").read_text())
    texts += [a["caption"] for a in coco["annotations"]]
    return texts


def _token_lists(texts: list[str]) -> list[list[str]]:
    """Each text tokenised whole (as CHAIR does) and each of its sentences on its own."""
    from nltk.tokenize import NLTKWordTokenizer, sent_tokenize, word_tokenize

    treebank = NLTKWordTokenizer()
    out = []
    for text in texts:
        out.append(word_tokenize(text.lower()))
        out += [treebank.tokenize(s) for s in sent_tokenize(text.lower())]
    return out


@functools.lru_cache(maxsize=1)
def _golden_token_lists() -> list[list[str]]:
    """_token_lists(_golden_texts()), tokenised once for the tests below (punkt and Treebank: ~5 s a time).
    Read only: callers copy before shuffling."""
    return _token_lists(_golden_texts())


def _assert_same(slow, fast, token_lists) -> None:
    for tokens in token_lists:
        assert fast.tag(tokens) == slow.tag(tokens), tokens


def test_golden_captions_tag_exactly(taggers):
    """1,500 LLaVA-1.5 + 2 + 2 Maxlinn captions and 401 COCO references, whole and per sentence."""
    slow, fast = taggers
    texts = _golden_texts()
    lists = _golden_token_lists()
    assert (len(texts), len(lists)) == (1905, 9524)
    want = [slow.tag(tokens) for tokens in lists]
    for tokens, tags in zip(lists, want):
        assert fast.tag(tokens) == tags, tokens
    for tokens, tags in zip(lists[:500], want):  # again, through the caption memo (NLTK's tags as above)
        assert fast.tag(tokens) == tags, tokens


def test_shuffled_tokens_tag_exactly(taggers):
    """The same tokens in seeded random orders: windows and tag histories no caption has."""
    slow, fast = taggers
    rng = random.Random(0)
    shuffled = []
    for tokens in _golden_token_lists():
        tokens = list(tokens)
        rng.shuffle(tokens)
        shuffled.append(tokens)
    _assert_same(slow, fast, shuffled)


def test_edge_cases_tag_exactly(taggers):
    """Digits (!YEAR, !DIGITS), hyphens (!HYPHEN unless leading), empty and one-token lists,
    unknown and non-ASCII words, tokens spelt like the padding, tokens with spaces."""
    slow, fast = taggers
    _assert_same(slow, fast, EDGE_CASES)
    _assert_same(slow, fast, [list(reversed(t)) for t in EDGE_CASES])


def _tiny_tagger(weights: dict, tagdict: dict | None = None):
    from nltk.tag.perceptron import PerceptronTagger

    from evalsuite.metrics.chair_tagger import FastPerceptronTagger

    slow = PerceptronTagger(load=False)
    slow.decode_json_params((weights, tagdict or {}, sorted({c for w in weights.values() for c in w})))
    return slow, FastPerceptronTagger(slow)


def test_hand_model_clear_win():
    """bias: NN 1.0; "i word run": VB 2.0; tagdict the -> DT.
    "the": DT (tagdict). "run": VB 2.0 > NN 1.0 -> VB. "dog": NN 1.0 > VB 0.0 -> NN.
    No near-tie, so no caption goes to NLTK's own code."""
    slow, fast = _tiny_tagger({"bias": {"NN": 1.0}, "i word run": {"VB": 2.0}}, {"the": "DT"})
    assert fast.tags(["the", "run", "dog"]) == ("DT", "VB", "NN")
    assert fast.tag(["the", "run", "dog"]) == slow.tag(["the", "run", "dog"])
    assert fast.fallbacks == 0


def test_hand_model_exact_tie_falls_back_to_label_order():
    """bias: A 1.0, B 1.0: every token ties at 1.0; NLTK's `max(classes, key=(score, label))`
    takes the larger label, B. The fast tagger sees the tie and lets NLTK decide."""
    slow, fast = _tiny_tagger({"bias": {"A": 1.0, "B": 1.0}})
    assert fast.tags(["x", "y"]) == ("B", "B") == tuple(t for _, t in slow.tag(["x", "y"]))
    assert fast.fallbacks == 1


def test_hand_model_float_order_decides():
    """A: bias 1e16, "i word x" 1.0, "i-1 word -START2-" -1e16; B: bias 0.5.
    NLTK sums in template order: (0 + 1e16) + 1.0 = 1e16 (1e16 + 1 is halfway between the
    doubles 1e16 and 1e16 + 2; round-half-even keeps 1e16), then + -1e16 = 0.0. So A = 0.0 < B = 0.5
    and NLTK says B, although the real sum for A is 1.0. The margin 0.5 is far under the rounding
    bound (1e-9 * 14 * 1e16), so the fast tagger must hand the caption to NLTK: B."""
    slow, fast = _tiny_tagger({"bias": {"A": 1e16, "B": 0.5}, "i word x": {"A": 1.0},
                               "i-1 word -START2-": {"A": -1e16}})
    assert slow.tag(["x"]) == [("x", "B")]
    assert fast.tag(["x"]) == [("x", "B")]
    assert fast.fallbacks == 1
