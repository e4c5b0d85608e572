"""lmms-eval judged tasks: which judge replies lmms-eval's own rules cannot read (evalsuite/lmms/judged.py),
on the recorded replies of tests/data/lmms_judge/cases.json; the oracle is lmms-eval's own outcome on them,
reference.json (written by lmms-eval's unmodified scoring: tests/data/lmms_judge/README.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.lmms import judged

DATA = Path(__file__).resolve().parents[1] / "data" / "lmms_judge"
CASES = json.loads((DATA / "cases.json").read_text())
REFERENCE = json.loads((DATA / "reference.json").read_text())


@pytest.mark.parametrize("task", ["llava_in_the_wild", "llava_bench_coco"])
def test_llava_unparsable_is_its_own_minus_one_pair(task):
    per_doc = REFERENCE[task]["per_doc"]
    assert any(d["scores"] == [-1, -1] for d in per_doc) and any(d["scores"] != [-1, -1] for d in per_doc)
    for d in per_doc:
        assert judged.PARSABLE[task](d["review"]) == (d["scores"] != [-1, -1]), d
    # the two tasks' released parsers differ: coco wants exactly two values on the first line
    assert judged.PARSABLE["llava_in_the_wild"]("Scores: 6.5; 7") is True
    assert judged.PARSABLE["llava_bench_coco"]("Scores: 6.5; 7") is False


def test_mmvet_unparsable_is_no_float_in_0_1():
    parsable = judged.PARSABLE["mmvet"]
    final = {c["question_id"]: list(c["replies"].values())[-1] for c in CASES["mmvet"]}
    for d in REFERENCE["mmvet"]["per_doc"]:
        reply = final[d["question_id"]]
        if parsable(reply):   # what lmms-eval scored is the number it read
            assert float(reply.split(" ")[0]) == d["score"], d
        else:
            assert reply == "" and d["score"] == 0.0, d
    assert [parsable(t) for t in ("Correctness: 0.5", "1.5", "-0.1", "0.0", " 0.7 ", "nan", "0.9\nok")] == \
        [False, False, False, True, True, False, False]


def test_hallusion_unparsable_has_none_of_its_words():
    parsable = judged.PARSABLE["hallusion_bench_image"]
    replies = {c["marker"]: c["replies"]["default"] for c in CASES["hallusion_bench_image"]}
    for d in REFERENCE["hallusion_bench_image"]["per_doc"]:
        reply = replies[d["marker"]]
        # '0' / '1': lmms-eval read incorrect / correct; '2': "unclear", said by the judge or by default
        assert parsable(reply) == (d["gpt4v_output_gpt_check"] != "2" or "unclear" in reply.lower()), d
    assert [parsable(t) for t in ("", "I am not sure", "UNCLEAR", "Incorrect.")] == [False, False, True, True]


class _Judge:
    def key(self, prompt):
        return "k"


def _binding(*tasks):
    return judged._Binding(_Judge(), None, "lmms-x", None, judged=tasks)


def test_mmvet_judgment_is_the_last_reply_to_its_prompt():
    b = _binding("mmvet")
    ask = lambda q, temp, text: b._record({"messages": [{"role": "user", "content": q}], "temperature": temp},
                                          {"content": text})
    ask("q1", 0.0, "Correctness: 0.5"); ask("q1", 0.5, "0.3"); ask("q1", 0.5, "0.3")   # read at last
    ask("q2", 0.0, ""); ask("q2", 0.0, ""); ask("q2", 0.0, "")                          # empty 3 times: 0
    ask("q3", 0.0, "x"); ask("q3", 0.5, "x"); ask("q3", 1.0, "x"); ask("q3", 1.5, "x"); ask("q3", 2.0, "0.4")
    assert b.counts("mmvet") == {"unparsable": 2, "judged": 3, "sample": ""}   # q3: scored 0 at temperature 2
    assert b.counts("llava_in_the_wild") is None


def test_several_judged_tasks_in_one_name_are_told_apart_by_prompt():
    b = _binding("llava_in_the_wild", "hallusion_bench_image")
    b._record({"messages": [{"role": "user", "content": "Imagine you are an intelligent teacher. Q"}]}, {"content": "ok"})
    b._record({"messages": [{"role": "user", "content": "[Context]\n[End of Assistant 1]"}]}, {"content": "8 9"})
    b._record({"messages": [{"role": "user", "content": "[Context]\n[End of Assistant 1]"}]}, {"content": "8 9"})
    assert b.counts("hallusion_bench_image") == {"unparsable": 1, "judged": 1, "sample": "ok"}
    assert b.counts("llava_in_the_wild") == {"unparsable": 0, "judged": 2, "sample": ""}


def test_more_than_half_unparsable_fails_in_one_line():
    assert judged.unparsable_failure("mmvet", {"unparsable": 2, "judged": 4, "sample": "x"}) is None
    message = judged.unparsable_failure("llava_in_the_wild", {"unparsable": 3, "judged": 4, "sample": '["dog"]'})
    assert message.startswith("llava_in_the_wild: 3 of 4 judge replies are unparsable") and "nothing stored" in message
    assert "\n" not in message and "'[\"dog\"]'" in message
