"""CHAIR against the reference scripts' own outputs (tests/data/golden/chair/expected/).

Every per-caption record (mentions, hallucinated, GT, recalled, n_tokens, CHAIRs, CHAIRi) and every
aggregate count of every variant and caption file must match exactly; the 80-image GT built with
pycocotools must equal expected_gt_objects.json for both normalisers; pattern singularisation must
equal pattern 3.6's column of singularize/tokens.tsv for all 3,291 tokens.
"""
from __future__ import annotations

import csv
import json

import pytest

from evalsuite.metrics import chair
from evalsuite.metrics.chair_gt import build_gt, load_gt

FILES = ["llava-1.5/greedy", "llava-1.5/beam5", "llava-1.5/opera", "maxlinn_example/example_inputs"]
GT_FILES = {"pattern": "gt_objects_coco2014_pattern.json.gz", "nltk_lemma": "gt_objects_coco2014_nltk_lemma.json.gz"}


@pytest.fixture(scope="module")
def scorers(chair_nltk_data):
    return {}


@pytest.fixture(scope="module")
def gt_caches(chair_golden):
    return {name: load_gt(chair_golden / "gt" / f)[0] for name, f in GT_FILES.items()}


def _scorer(scorers, variant):
    if variant not in scorers:
        scorers[variant] = chair.ChairScorer(variant)
    return scorers[variant]


def _read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_gt_caches_have_every_coco2014_image(gt_caches):
    """README: 123,287 images; 725 empty in the pattern cache, 723 in the lemma cache."""
    assert {k: len(v) for k, v in gt_caches.items()} == {"pattern": 123287, "nltk_lemma": 123287}
    assert sum(1 for v in gt_caches["pattern"].values() if not v) == 725
    assert sum(1 for v in gt_caches["nltk_lemma"].values() if not v) == 723


@pytest.mark.parametrize("variant", list(chair.VARIANTS))
@pytest.mark.parametrize("name", FILES)
def test_every_record_and_count_matches_reference(chair_golden, scorers, gt_caches, variant, name):
    items = [(d["image_id"], d["caption"]) for d in _read_jsonl(chair_golden / "captions" / f"{name}.jsonl")]
    records = chair.score_captions(_scorer(scorers, variant), items, gt_caches[chair.VARIANTS[variant].gt])
    expected = _read_jsonl(chair_golden / "expected" / variant / f"{name}.jsonl")
    assert len(records) == len(expected)
    for rec, exp in zip(records, expected):
        assert {k: rec[k] for k in exp} == exp, f"{variant} {name} line {exp['index']}"
        assert len(rec["positions"]) == len(rec["mentions"])
    summary = json.loads((chair_golden / "expected" / "summary.json").read_text())["results"][variant][name]
    agg = chair.aggregate(records)
    for key in chair.COUNT_KEYS:
        assert agg[key] == summary[key], key
    for key in ("CHAIRs", "CHAIRi", "Recall", "Len"):
        assert agg[key] == pytest.approx(summary[key], abs=1e-12), key


def test_opera_headline_reproduces_published_numbers(chair_golden, scorers, gt_caches):
    """OPERA paper, LLaVA-1.5 + OPERA decoding: CHAIRs 44.6, CHAIRi 12.8 (223/500, 466/3653)."""
    items = [(d["image_id"], d["caption"]) for d in _read_jsonl(chair_golden / "captions/llava-1.5/opera.jsonl")]
    s = chair.summarize(chair.score_captions(_scorer(scorers, "opera"), items, gt_caches["pattern"]), "opera")
    assert (s["num_hallucinated_caps"], s["hallucinated_mentions"], s["coco_mentions"]) == (223, 466, 3653)
    assert f"{s['CHAIRs'] * 100:.1f}/{s['CHAIRi'] * 100:.1f}" == "44.6/12.8"
    lo, hi = s["ci"]["CHAIRs"]
    assert lo < s["CHAIRs"] < hi


@pytest.mark.parametrize("normalizer", ["pattern", "nltk_lemma"])
def test_80_image_gt_built_with_pycocotools(chair_golden, chair_nltk_data, normalizer):
    base = chair_golden / "coco_val2014_80"
    built = build_gt([base / "instances.json"], [base / "captions.json"], normalizer)
    expected = json.loads((base / "expected_gt_objects.json").read_text())[normalizer]
    assert {str(k): v for k, v in built.items()} == expected


def test_pattern_singularize_matches_pattern_36(chair_golden):
    from evalsuite.metrics.chair_normalize import pattern_singularize

    with open(chair_golden / "singularize" / "tokens.tsv", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert len(rows) == 3291
    wrong = [(r["token"], r["pattern_singularize"], pattern_singularize(r["token"]))
             for r in rows if pattern_singularize(r["token"]) != r["pattern_singularize"]]
    assert wrong == []


def test_lemma_in_context_matches_opera_pipeline(chair_golden, chair_nltk_data):
    """Every (token, Penn tag) -> lemma pair OPERA's pipeline produced, through our WordNet mapping."""
    from nltk.stem import WordNetLemmatizer

    from evalsuite.metrics.chair_normalize import penn_to_wordnet

    lem = WordNetLemmatizer()
    with open(chair_golden / "singularize" / "lemma_in_context.tsv", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    wrong = [r for r in rows if penn_to_wordnet(r["penn_tag"]) != r["wordnet_pos"]
             or lem.lemmatize(r["token"], r["wordnet_pos"]) != r["lemma"]]
    assert wrong == []


TRICKY = ['"Hello," she said. "It\'s a dog\'s life."', "They cannot go; gonna wanna gimme 'tis fine.",
          "1,000 dogs, 2,5 cats... and (a bus.)", "Mr. Smith's car. Dr. Who? yes! no.", "a dog. )",
          "the dogs' bowls' lids' end'", "e.g. a cat, i.e. a dog -- or else.", "quote \"x\" and 'y' ``z''",
          "a  \t\n b . . .", "caf\u00e9 \u201cnice\u201d dog.", "it's 3.5 m. tall. ok.", "the end.\"", "'s", "."]


def test_tokenizer_equals_nltk_word_tokenize(chair_golden, chair_nltk_data):
    """`chair.tokenizer=nltk310` against the installed NLTK 3.10: every golden caption and reference
    caption, plus edge cases, token for token (with the official punkt tables; the default nltk38 rules
    meet NLTK 3.8.1 through the reference outputs above, whose n_tokens 3.8.1 made, and
    tests/unit/test_chair_tokenize.py)."""
    from nltk import word_tokenize

    from evalsuite.metrics.chair_tokenize import Tokenizer

    texts = [d["caption"] for p in sorted((chair_golden / "captions").rglob("*.jsonl")) for d in _read_jsonl(p)]
    texts += [a["caption"] for a in json.loads((chair_golden / "coco_val2014_80/captions.json").read_text())["annotations"]]
    tok = Tokenizer("nltk310")
    assert [t for t in texts + TRICKY if tok(t) != word_tokenize(t.lower())] == []
