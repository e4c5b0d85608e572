"""Object HalBench's parse and score rules on hand-worked cases (evalsuite/metrics/objhal.py); the released
scripts' own numbers are tests/unit/test_objhal_reference.py's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.errors import UserError
from evalsuite.metrics import objhal as rules

DATA = Path(__file__).resolve().parents[1] / "data" / "objhal"


@pytest.fixture(scope="module")
def vocab():
    return rules.Vocab.load(DATA / "synonyms_refine.txt")


@pytest.fixture(scope="module")
def nlp():
    spacy = pytest.importorskip("spacy")
    return spacy.load(DATA / "pipeline")


@pytest.mark.parametrize("reply, want", [
    ('["dog", "cat"]', ["dog", "cat"]),
    (' [ "dog" ] ', ["dog"]),
    ("[]", []),
    ('Here they are:\n["dog", "cat"]', ["dog", "cat"]),        # '["' present: the last line is read
    ('Here:\n["dog"]\n', ["dog"]),                              # stripped first, so the list is last
    ('[1, "dog", null]', [1, "dog", None]),
    ('```json\n["dog"]\n```', None),                            # last line is the fence
    ('["dog"] and more', None),
    ('Objects:\n["dog"]\nThat is all.', None),
    ("()", None), ("The objects are a dog.", None), ("", None), ('["dog", "cat"', None),
    ('{"objects": ["dog"]}', None), ('"dog"', None), ("3", None), ("null", None),   # JSON, not a list
    ("[\n  \"dog\"\n]", ["dog"]),
])
def test_parse_object_list(reply, want):
    assert rules.parse_object_list(reply) == want


def test_prompt_short_answers_and_length():
    p = rules.render_prompt("Q {answer}?", "It is a dog.")
    assert "<image> Q It is a dog.?\n\n[End of Question]" in p          # the question's {answer} replaced too
    assert "[Start of Examiner's Answer]\n\nIt is a dog.\n\n[End of Examiner's Answer]" in p
    assert p.startswith("You are an expert in image objects extraction") and '["object_1", ..., "object_n"]' in p
    assert rules.clean_answer("Assistant: A dog.  ") == "A dog."
    assert rules.is_short(" a  red dog ") and not rules.is_short("a red dog here")
    assert rules.word_count("  a  red dog ") == 4                       # split on single spaces: "a", "", "red", "dog"


def test_vocab_and_double_words(vocab):
    assert vocab.word_to_category["motor bike"] == "motorcycle"          # items stripped
    assert vocab.word_to_category["ski"] == "skis" and vocab.word_to_category["iPhone"] == "cell phone"
    d = vocab.double_words
    assert d["teddy bear"] == "teddy bear" and d["baby elephant"] == "elephant" and d["passenger train"] == "train"
    assert d["bow tie"] == "tie" and d["toilet seat"] == "toilet" and d["home plate"] == "home plate"
    d_merge = rules.merge_pairs   # CHAIR's merge over objhal's table
    assert d_merge(["a", "teddy", "bear", "on", "a", "toilet", "seat"], d) == ["a", "teddy bear", "on", "a", "toilet"]
    assert d_merge(["a", "teddy", "bear", "dog"], d, keep_single=False) == ["teddy bear"]
    # toilet and seat both present: every seat goes; home plate is a double word but no COCO word
    assert vocab.mentions(["seat", "toilet", "seat", "home plate", "dog", "dog"]) == \
        [("toilet", "toilet"), ("dog", "dog"), ("dog", "dog")]
    assert vocab.mentions(["seat"]) == [("seat", "chair")]


def test_caption_words_lemmas(vocab):
    pytest.importorskip("nltk")
    from evalsuite.metrics import nltk_resources as res

    try:
        res.require((res.WORDNET,))
    except UserError as e:
        pytest.skip(str(e))
    lem = rules.wordnet_noun_lemmatizer()
    tokens = ["two", "men", "and", "people", "near", "wine", "glasses", "and", "teddy", "bears"]
    words, mentions = vocab.caption_words(tokens, lem)
    # WordNet's noun lemma keeps "men" (no COCO word); "glasses" -> glass, then the two-word merge
    assert words == ["two", "men", "and", "people", "near", "wine glass", "and", "teddy bear"]
    assert mentions == [("people", "person"), ("wine glass", "wine glass"), ("teddy bear", "teddy bear")]


def test_refine_objects(nlp, vocab):
    # "black dog": nouns only; "dining tables": lemmas make the two-word name; "table cloth": one noun phrase, no
    # COCO word; "Men" -> man; duplicates once; 1 and "" give nothing; a nested list is formatted as Python does
    got = rules.refine_objects(["black dog", "dining tables", "table cloth", "Men", "dog", 1, "", ["cat"], "iPhone"],
                               nlp, vocab)
    assert got == ["dog", "dining table", "table cloth", "man", "cat", "iPhone"]
    assert vocab.mentions(got) == [("dog", "dog"), ("dining table", "dining table"), ("man", "person"),
                                   ("cat", "cat"), ("iPhone", "cell phone")]
    # a two-word name wins over the noun runs of the same name: "a teddy bear dog" -> only "teddy bear"
    assert rules.refine_objects(["teddy bear dog"], nlp, vocab) == ["teddy bear"]


def test_score_and_released_values_hand_worked():
    s1 = {**rules.score_response([("dog", "dog"), ("cat", "cat"), ("puppy", "dog")], ["dog", "person"]), "n_words": 10}
    s2 = {**rules.score_response([], ["car"]), "n_words": 5}
    s3 = {**rules.score_response([("man", "person")], ["person", "tie"]), "n_words": 3}
    assert s1["hallucinated"] == [["cat", "cat"]] and s1["recalled"] == ["dog"] and s1["CHAIRi"] == 1 / 3
    assert s1["CHAIRs"] == 1 and s2["CHAIRs"] == 0 and s3["CHAIRs"] == 0
    v = rules.released_values([s1, s2, s3])
    o, p = v["overall"], v["printed"]
    # 1 of 2 responses with COCO words hallucinates; 1 of 4 mentions; recalled dog + person of 2 + 1 + 2 GT
    assert o["CHAIRs_refine"] == 0.5 and o["CHAIRs"] == 1 / 3 and o["CHAIRi"] == 0.25 and o["obj_rec"] == 2 / 5
    assert o["coco_sentence_num"] == 2.0 and o["coco_word_count"] == 2.0 and o["gt_word_count"] == 5.0
    assert o["avg_word_len"] == 6.0 and o["correct_rate"] == 0.5 and o["object_correct_rate"] == 0.75
    assert p["CHAIRs_refine"] == 50.0 and p["object_correct_rate"] == 75.0 and p["avg_len"] == 6.0
    assert rules.summary_text(o).splitlines()[0] == "Response Hall   : 50.00"
    # no response with a COCO word: the released script divides by zero; nothing is a number
    none = rules.released_values([s2])["printed"]
    assert none["CHAIRs_refine"] is None and none["CHAIRi"] is None and none["CHAIRs"] == 0.0


def test_synonyms_file_errors(tmp_path):
    with pytest.raises(UserError, match="objhal.synonyms: .*: no such file"):
        rules.Vocab.load(tmp_path / "none.txt")
    (tmp_path / "s.txt").write_text("just one line\n")
    with pytest.raises(UserError, match="not a synonyms file"):
        rules.Vocab.load(tmp_path / "s.txt")


def test_prompt_file_errors(tmp_path):
    from evalsuite.tasks.objhal import load_records

    f = tmp_path / "p.jsonl"
    ok = {"image_id": "42", "question": "Describe.", "image": "aGVsbG8="}
    f.write_text(json.dumps(ok) + "\n")
    assert load_records(f)[0] == {"line": 1, "image_id": 42, "question": "Describe.", "image": b"hello"}
    f.write_text(json.dumps({**ok, "image_id": 7, "image": "aGVs\nbG8="}) + "\n")
    assert load_records(f)[0]["image"] == b"hello" and load_records(f)[0]["image_id"] == 7
    for rec, msg in [({**ok, "image_id": None}, "field 'image_id'"), ({**ok, "image_id": True}, "field 'image_id'"),
                     ({**ok, "question": 3}, "field 'question'"), ({**ok, "image": ""}, "field 'image' missing"),
                     ({**ok, "image": "a b!"}, "field 'image' is not valid base64"), ([1], "not a JSON object")]:
        f.write_text(json.dumps(ok) + "\n" + json.dumps(rec) + "\n")
        with pytest.raises(UserError, match=f"objhal.data: {f}:2: {msg}" if msg != "not a JSON object" else msg):
            load_records(f)
    f.write_text(json.dumps(ok) + "\n{broken\n")
    with pytest.raises(UserError, match=":2"):
        load_records(f)
    f.write_text("")
    with pytest.raises(UserError, match="no records"):
        load_records(f)


class _Judge:
    """Replies by answer: a stand-in for evalsuite.judge.judge.Judge.ask."""

    def __init__(self, replies: dict[str, str]):
        self.replies, self.stats, self.asked = replies, {"asked": 0, "cached": 0}, []

    def ask(self, requests, cache_root, task, prompt_version, log_dir):
        self.asked += requests
        out = []
        for messages in requests:
            answer = messages[0]["content"].split("[Start of Examiner's Answer]\n\n")[1].split("\n\n[End")[0]
            out.append({"content": self.replies[answer], "model": "j"})
        return out


def _scored(nlp, vocab, answers, replies, gt):
    from types import SimpleNamespace

    from evalsuite.tasks.base import Plan
    from evalsuite.tasks.objhal import METRICS, ObjhalTask

    judge = _Judge(replies)
    plan = Plan("objhal", "1", {}, {"extractor": "judge", "n_boot": 0},
                state={"judge": judge, "nlp": nlp, "vocab": vocab, "gt": gt, "extra": {}}, specs=METRICS)
    ctx = SimpleNamespace(resume_root=None, output_dir=None, gen=SimpleNamespace(seed=0))
    rows = [{"key": str(i), "image_id": i, "prompt": "Describe.", "answer": a} for i, a in enumerate(answers)]
    return ObjhalTask().scored(ctx, plan, rows), judge


def test_unparsable_left_out_and_counted_short_not_asked(nlp, vocab):
    from evalsuite.errors import RunFailure

    answers = ["Assistant: A dog.", "There is a black dog and a cat here.", "A man rides a red bicycle today.",
               "Nothing but a wooden chair here."]
    replies = {"There is a black dog and a cat here.": '["black dog", "cat"]',
               "A man rides a red bicycle today.": '["man", "bicycle"]',
               "Nothing but a wooden chair here.": "A chair."}
    gt = {0: ["dog"], 1: ["dog"], 2: ["bicycle", "person"], 3: ["chair"]}
    result, judge = _scored(nlp, vocab, answers, replies, gt)
    assert len(judge.asked) == 3 and judge.asked[0][0]["role"] == "system"      # "A dog." is short: not asked
    values = {m.metric: m.value for m in result.metrics}
    extra = result.extra
    assert extra["unparsable"] == 1 and extra["judged"] == 3 and extra["short_answers"] == 1 and extra["scored"] == 3
    # scored: the short answer (no objects, 1 GT) and the two parsed replies (cat hallucinated; dog, person and
    # bicycle right); the unparsable one is in no rate
    assert values["CHAIRs_refine"] == 50.0 and values["CHAIRi"] == 25.0 and values["obj_rec"] == 75.0
    assert values["avg_len"] == (2 + 9 + 7) / 3 and values["unparsable_rate"] == 0.25 and values["CHAIRs"] == (1 / 3) * 100
    assert values["correct_rate"] == 50.0 and values["object_correct_rate"] == 75.0
    assert [s["parsed"] for s in result.samples] == [True, True, True, False]
    # two of three judged replies unparsable: more than half, one line, nothing returned
    replies["A man rides a red bicycle today."] = "()"
    with pytest.raises(RunFailure, match=r"objhal: 2 of 3 judge replies are no JSON list of objects .*nothing stored"):
        _scored(nlp, vocab, answers, replies, gt)
