"""CHAIR unit tests with hand-worked values (the working is in each docstring)."""
from __future__ import annotations

import json
import pickle
import sys
import types

import pytest

from evalsuite.errors import UserError
from evalsuite.metrics import chair
from evalsuite.metrics.chair_vocab import load_vocab


def test_vocabulary_shape():
    """synonyms.txt: 80 lines = 80 categories; 403 distinct items (README)."""
    v = load_vocab()
    assert len(v.categories) == 80 and len(v.word_to_category) == 403
    assert v.word_to_category["people"] == "person" and v.word_to_category["seat"] == "chair"
    assert " motor bike" in v.word_to_category and "motor bike" not in v.word_to_category


def test_merge_pairs():
    """hot+dog -> "hot dog"; baby elephant -> elephant; train track swallows both; a lone final
    "teddy" stays: [a, hot dog, and, elephant, on, train track, teddy]."""
    toks = ["a", "hot", "dog", "and", "baby", "elephant", "on", "train", "track", "teddy"]
    v = load_vocab()
    want = ["a", "hot dog", "and", "elephant", "on", "train track", "teddy"]
    assert chair.merge_pairs(toks, v.pairs, firsts=v.pair_firsts) == chair.merge_pairs(toks, v.pairs) == want


def test_toilet_seat_rule_drops_every_seat():
    """[a, toilet, seat, and, a, seat]: toilet and seat both present -> seats dropped -> toilet@1 only;
    without the toilet, seat@1 counts as chair."""
    v = load_vocab()
    assert chair.find_mentions(["a", "toilet", "seat", "and", "a", "seat"], v) == [("toilet", "toilet", 1)]
    assert chair.find_mentions(["a", "seat"], v) == [("seat", "chair", 1)]


def test_zero_mentions_is_chair_i_zero_not_a_crash():
    """No mentions: 0 hallucinated / 0 mentioned is CHAIRi 0.0, CHAIRs 0; GT still listed."""
    rec = chair.score_caption([], {"dog"}, 5)
    assert (rec["CHAIRi"], rec["CHAIRs"], rec["recalled"], rec["gt_objects"]) == (0.0, 0, [], ["dog"])


def test_score_caption_and_aggregate_by_hand():
    """Caption 1: dog, cat, dog with GT {dog}: cat hallucinated -> CHAIRi 1/3, CHAIRs 1, recalled [dog].
    Caption 2: no mentions, GT {dog}, 5 tokens.
    Aggregate: caps 2, hall caps 1, hall 1 / mentions 3, recalled 1 / GT 2, tokens 7+5=12:
    CHAIRs 0.5, CHAIRi 1/3, Recall 0.5, Len 6."""
    r1 = chair.score_caption([("dog", "dog", 1), ("cat", "cat", 3), ("dog", "dog", 5)], {"dog"}, 7)
    assert r1["hallucinated"] == [["cat", "cat"]] and r1["hallucinated_positions"] == [3]
    assert r1["CHAIRi"] == pytest.approx(1 / 3) and r1["CHAIRs"] == 1 and r1["recalled"] == ["dog"]
    agg = chair.aggregate([r1, chair.score_caption([], {"dog"}, 5)])
    assert {k: agg[k] for k in chair.COUNT_KEYS} == {
        "num_caps": 2, "num_hallucinated_caps": 1, "hallucinated_mentions": 1, "coco_mentions": 3,
        "recalled_gt": 1, "total_gt": 2, "total_tokens": 12}
    assert (agg["CHAIRs"], agg["CHAIRi"], agg["Recall"], agg["Len"]) == (0.5, pytest.approx(1 / 3), 0.5, 6.0)


def test_aggregate_of_nothing_is_zero():
    agg = chair.aggregate([])
    assert agg["num_caps"] == 0 and agg["CHAIRs"] == 0.0 and agg["CHAIRi"] == 0.0


def test_bootstrap_cis_seeded_and_bracketing():
    """Ten captions, three hallucinated: CHAIRs 0.3 lies inside its CI; same seed, same CI."""
    recs = [chair.score_caption([("cat", "cat", 0)], {"dog"} if i < 3 else {"cat"}, 4) for i in range(10)]
    a, b = chair.chair_cis(recs, seed=3), chair.chair_cis(recs, seed=3)
    assert a == b and a["CHAIRs"][0] <= 0.3 <= a["CHAIRs"][1] and 0.0 <= a["CHAIRi"][0] <= a["CHAIRi"][1] <= 1.0


def test_unknown_variant():
    with pytest.raises(UserError, match="unknown CHAIR variant 'chairx'"):
        chair.get_variant("chairx")


@pytest.mark.parametrize("word,singular", [
    ("doggies", "doggies"), ("cookies", "cookies"), ("omnibuses", "omnibus"), ("buses", "bus"), ("bus", "bu"),
    ("glass", "glas"), ("people", "person"), ("ties", "ty"), ("skis", "ski"), ("jeans", "jean"), ("as", "as"),
    ("mothers-in-law", "mother-in-law"), ("dogs'", "dog's"), ("'s", "'"),
])
def test_pattern_singularize_quirks(word, singular):
    """pattern 3.6 behaviour, including where textblob differs (doggies, omnibuses, jeans, as)."""
    from evalsuite.metrics.chair_normalize import pattern_singularize

    assert pattern_singularize(word) == singular


def test_original_scorer_by_hand(punkt_dir):
    """"A man sits on a bench next to two dogs." -> a man sit on a bench next to two dog . (11 tokens);
    mentions man@1 (person), bench@5, dog@9; GT {person, bench}: dog hallucinated, CHAIRi 1/3."""
    rec = chair.ChairScorer("original").score("A man sits on a bench next to two dogs.", {"person", "bench"})
    assert rec["n_tokens"] == 11 and rec["positions"] == [1, 5, 9]
    assert rec["mentions"] == [["man", "person"], ["bench", "bench"], ["dog", "dog"]]
    assert rec["hallucinated"] == [["dog", "dog"]] and rec["recalled"] == ["bench", "person"]


def test_missing_gt_is_an_error_unless_allowed(punkt_dir):
    """Image 7 absent: error naming the count; allowed -> empty GT, the mention is hallucinated."""
    sc = chair.ChairScorer("original")
    with pytest.raises(UserError, match="1 image id"):
        chair.score_captions(sc, [(7, "a dog")], {1: frozenset()})
    (rec,) = chair.score_captions(sc, [(7, "a dog")], {1: frozenset()}, allow_missing=True)
    assert rec["CHAIRs"] == 1 and rec["gt_objects"] == []


def test_gt_cache_roundtrip_and_bare_mapping(tmp_path):
    from evalsuite.metrics.chair_gt import load_gt, save_gt

    save_gt(tmp_path / "g.json.gz", {3: ["dog", "cat"]}, "pattern", source="x")
    objects, meta = load_gt(tmp_path / "g.json.gz")
    assert objects == {3: frozenset({"cat", "dog"})} and meta["normalizer"] == "pattern"
    (tmp_path / "bare.json").write_text(json.dumps({"5": ["bus"]}))
    assert load_gt(tmp_path / "bare.json")[0] == {5: frozenset({"bus"})}
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="bad.json"):
        load_gt(tmp_path / "bad.json")


def _fake_chair_pickle(monkeypatch, protocol: int = 2) -> bytes:
    """A pickle shaped like the circulating chair.pkl: a `chair.CHAIR` object with imid_to_objects."""
    mod = types.ModuleType("chair")

    class CHAIR:
        pass

    CHAIR.__module__, CHAIR.__qualname__ = "chair", "CHAIR"
    mod.CHAIR = CHAIR
    monkeypatch.setitem(sys.modules, "chair", mod)
    obj = CHAIR()
    obj.imid_to_objects = {139: {"person", "tv"}, 285: set()}
    obj.double_word_dict = {"hot dog": "hot dog"}
    return pickle.dumps(obj, protocol=protocol)


def test_restricted_unpickler_imports_chair_pkl(tmp_path, monkeypatch):
    from evalsuite.metrics.chair_gt import import_chair_pkl

    (tmp_path / "chair.pkl").write_bytes(_fake_chair_pickle(monkeypatch))
    assert import_chair_pkl(tmp_path / "chair.pkl") == {139: ["person", "tv"], 285: []}


def test_restricted_unpickler_refuses_code(tmp_path):
    """A pickle that would call os.system is refused and nothing runs."""
    from evalsuite.metrics.chair_gt import import_chair_pkl

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    (tmp_path / "evil.pkl").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(UserError, match="refusing to load"):
        import_chair_pkl(tmp_path / "evil.pkl")
    assert not marker.exists()


def test_read_captions_formats_and_errors(tmp_path):
    from evalsuite.metrics.chair_io import read_captions

    good = tmp_path / "a.jsonl"
    good.write_text('{"image_id": 5, "caption": "x"}\n\n{"image_id": "COCO_val2014_000000002239.jpg", "text": "y"}\n'
                    '{"image_id": "000000000042.jpg", "text": "z"}\n')
    assert read_captions(good) == [(5, "x"), (2239, "y"), (42, "z")]
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"image_id": 5, "caption": "x"}\n{"image_id": 6, "caption": \n')
    with pytest.raises(UserError, match=r"b\.jsonl:2: not valid JSON"):
        read_captions(bad)
    bad.write_text('{"image_id": 5}\n')
    with pytest.raises(UserError, match=r"b\.jsonl:1: missing field 'caption'"):
        read_captions(bad)
    bad.write_text('{"image_id": "cat.jpg", "caption": "x"}\n')
    with pytest.raises(UserError, match=r"b\.jsonl:1: image_id"):
        read_captions(bad)


def _reference_words(caption, vocab):
    """The reference `caption_to_words` (LisaAnne/Hallucination utils/chair.py), statement for
    statement, with positions: nltk.word_tokenize(lower) -> singularize each -> double words ->
    toilet/seat -> vocabulary words. Returns ((word, category, merged position) hits, merged length)."""
    from nltk import word_tokenize

    from evalsuite.metrics.chair_normalize import pattern_singularize

    words = [pattern_singularize(w) for w in word_tokenize(caption.lower())]
    i, double_words = 0, []
    while i < len(words):
        double_word = " ".join(words[i:i + 2])
        if double_word in vocab.pairs:
            double_words.append(vocab.pairs[double_word])
            i += 2
        else:
            double_words.append(words[i])
            i += 1
    seat_gone = "toilet" in double_words and "seat" in double_words
    hits = [(w, vocab.word_to_category[w], k) for k, w in enumerate(double_words)
            if w in vocab.word_to_category and not (seat_gone and w == "seat")]
    return hits, len(double_words)


ODD_CAPTIONS = ["A toilet seat. The seat.", '"hot dog".', "A \u212a dog.", "two dogs, mr. smith's cat.",
                "the dogs' bowls' lids", "a teddy\x1cbear", "a hot\ndog", "baby elephant's toy", "rock'n'roll bus",
                "A 'teddy' bear", "people, men and women.", "a cell-phone, a cell phone.", "TV's remote...", ""]


def test_scorer_equals_the_reference_pipeline(punkt_dir):
    """`score_captions` equals the reference `caption_to_words` (written out above, on
    `nltk.word_tokenize` itself) through `score_caption`, on 1,500 generated captions full of pairs,
    toilet/seat and GT hits/misses and on odd ones (quotes, apostrophes, control characters, Unicode).
    The installed NLTK is 3.10, so the scorer runs with `tokenizer="nltk310"` here; the default nltk38
    rules are checked against NLTK 3.8.1's output in tests/unit/test_chair_tokenize.py."""
    import random

    v = load_vocab()
    rng = random.Random(7)
    pool = sorted(v.pair_firsts) + ["bear", "dog", "dogs", "seat", "seats", "toilet", "table", "sign", "phone",
                                    "people", "a", "the", "of", "and", "red", "cats,", "man's", "Bus.", "'s"]
    items = [(rng.randint(1, 5), " ".join(rng.choice(pool) for _ in range(rng.randint(0, 25))) + rng.choice(["", "."]))
             for _ in range(1500)]
    items += [(i % 5 + 1, c) for i, c in enumerate(ODD_CAPTIONS)]
    gt = {i: frozenset(rng.sample(["person", "dog", "cat", "chair", "toilet", "teddy bear"], i % 4)) for i in range(1, 6)}
    records = chair.score_captions(chair.ChairScorer("original", tokenizer="nltk310"), items, gt)
    for index, ((image_id, caption), rec) in enumerate(zip(items, records)):
        hits, n_tokens = _reference_words(caption, v)
        want = {"index": index, "image_id": image_id, **chair.score_caption(hits, gt[image_id], n_tokens)}
        assert list(rec.items()) == list(want.items()), caption
    assert sum(r["CHAIRs"] for r in records) > 300 and any(r["mentions"] == [] for r in records)


def test_run_config_chair_tokenizer_field():
    """`chair.tokenizer` in a run config: nltk38 by default, nltk310 accepted, anything else one error
    naming the field (before any model loads)."""
    from evalsuite.run_config import load_eval_config

    base = ["--ckpt", "/nonexistent/ckpt", "--tasks", "chair", "--data-root", "/nonexistent/data"]
    assert load_eval_config(base)[0].chair.tokenizer == "nltk38"
    assert load_eval_config([*base, "chair.tokenizer=nltk310"])[0].chair.tokenizer == "nltk310"
    with pytest.raises(UserError, match="chair.tokenizer: 'nltk39' is not one of 'nltk38', 'nltk310'"):
        load_eval_config([*base, "chair.tokenizer=nltk39"])
