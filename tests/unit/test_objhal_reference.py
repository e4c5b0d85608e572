"""evalsuite's Object HalBench rules against RLAIF-V's released scripts' own output on the same inputs
(tests/data/objhal/README.md: eval_gpt_obj_halbench.py and summarize_gpt_obj_halbench_review.py, unmodified,
with recorded judge replies and a constructed spaCy pipeline). Never compared with evalsuite's output."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from evalsuite.metrics import objhal as rules

DATA = Path(__file__).resolve().parents[1] / "data" / "objhal"
REF = DATA / "reference"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def setup():
    pytest.importorskip("spacy")
    from evalsuite.metrics import nltk_resources as res
    from evalsuite.metrics.chair_tokenize import Tokenizer

    try:
        res.require((res.PUNKT, res.WORDNET))
    except Exception as e:   # noqa: BLE001 - a missing resource is a UserError naming it
        pytest.skip(str(e))
    import spacy

    vocab = rules.Vocab.load(DATA / "synonyms_refine.txt")
    # the released script ran with NLTK 3.10.4: its word_tokenize rules
    tokenize, lemmatize = Tokenizer("nltk310"), rules.wordnet_noun_lemmatizer()
    prompts = _jsonl(DATA / "prompts.jsonl")
    answers = _jsonl(DATA / "answers.jsonl")
    ann = DATA / "coco" / "annotations"
    ids = {int(p["image_id"]) for p in prompts}
    gt, known = rules.build_gt(sorted(ann.glob("instances*.json")), sorted(ann.glob("captions*.json")), ids, vocab,
                               tokenize, lemmatize)
    assert ids <= known
    return {"vocab": vocab, "tokenize": tokenize, "lemmatize": lemmatize, "gt": gt, "prompts": prompts,
            "answers": answers, "nlp": spacy.load(DATA / "pipeline")}


def _score(setup, mode: str) -> list[dict]:
    """evalsuite's per-response records, in the answer file's order, from the replies the released script
    accepted (the last one served for each answer)."""
    served = defaultdict(list)
    if mode == "judge":
        for row in _jsonl(REF / "judge" / "served.jsonl"):
            served[row["answer"]].append(row)
    out = []
    for p, a in zip(setup["prompts"], setup["answers"]):
        caption = rules.clean_answer(a["text"])
        if mode == "judge":
            rows = sorted(served.get(caption, []), key=lambda r: r["attempt"])
            objects = rules.refine_objects(rules.parse_object_list(rows[-1]["content"]), setup["nlp"],
                                           setup["vocab"]) if rows else []
            mentions = setup["vocab"].mentions(objects)
        else:
            objects, mentions = setup["vocab"].caption_words(setup["tokenize"](caption), setup["lemmatize"])
        out.append({"image_id": int(p["image_id"]), "caption": caption, "objects": objects,
                    "n_words": rules.word_count(caption), **rules.score_response(mentions, setup["gt"][int(p["image_id"])])})
    return out


@pytest.mark.parametrize("mode", ["judge", "chair"])
def test_per_response_equals_released(setup, mode):
    review = json.loads((REF / mode / "hall_obj_halbench_answer_-1.json").read_text())
    released = {s["image_id"]: s for s in review["sentences"]}
    ours = _score(setup, mode)
    assert len(released) == len(ours) == 300
    for s in ours:
        r = released[s["image_id"]]
        assert r["caption"] == s["caption"]
        assert sorted(r["mscoco_gt_words"]) == s["gt_objects"], s["image_id"]
        assert r["words"] == s["objects"], s["image_id"]
        assert [list(x) for x in r["mscoco_generated_words"]] == s["mentions"], s["image_id"]
        assert [[w, n] for w, n in r["mscoco_hallucinated_words"]] == [[w, [w, c]] for w, c in s["hallucinated"]]
        assert r["metrics"]["CHAIRs"] == s["CHAIRs"]
        assert r["metrics"]["CHAIRi"] == s["CHAIRi"]


@pytest.mark.parametrize("mode", ["judge", "chair"])
def test_overall_and_summary_equal_released(setup, mode):
    review = json.loads((REF / mode / "hall_obj_halbench_answer_-1.json").read_text())
    got = rules.released_values(_score(setup, mode))["overall"]
    want = review["overall_metrics"]
    for key in ("CHAIRs", "CHAIRs_refine", "CHAIRi", "obj_rec", "sentence_num", "coco_sentence_num",
                "coco_word_count", "gt_word_count", "avg_word_len", "correct_rate", "object_correct_rate"):
        assert got[key] == want[key], key      # the same float operations: exactly equal
    printed = (REF / mode / "obj_halbench_scores.txt").read_text().split("===> constructed\n", 1)[1]
    assert rules.summary_text(got) == printed.rstrip("\n")


def test_judge_requests_and_unreadable_replies_equal_released(setup):
    """What the released script sent (one system message: the released prompt) and which replies it could not
    read (it asked again): evalsuite's parse rejects exactly those and reads the last one served."""
    rows = _jsonl(REF / "judge" / "served.jsonl")
    by_answer = defaultdict(list)
    for r in rows:
        by_answer[r["answer"]].append(r)
    asked = set(by_answer)
    questions = {rules.clean_answer(a["text"]): p["question"] for p, a in zip(setup["prompts"], setup["answers"])}
    for caption in questions:
        assert (caption in asked) == (not rules.is_short(caption)), caption
    retried = 0
    for caption, served in by_answer.items():
        served.sort(key=lambda r: r["attempt"])
        assert all(r["role"] == "system" and r["n_messages"] == 1 for r in served)
        assert served[0]["prompt"] == rules.render_prompt(questions[caption], caption)
        assert all(rules.parse_object_list(r["content"]) is None for r in served[:-1]), caption
        assert isinstance(rules.parse_object_list(served[-1]["content"]), list), caption
        retried += len(served) - 1
    assert retried == (REF / "judge" / "eval_stdout.txt").read_text().count("Content is not json interpretable") > 0
