"""HallusionBench's rules (evalsuite/metrics/hallusion.py): hand-worked values, and equality with the released
scoring code's own outputs on the same answers and judge replies (tests/data/hallusion/README.md: lmms-eval
0.7.3's hallusion_bench_image scoring and VLMEvalKit e8e78f05's Hallusion_rating / YOrN_Extraction /
YOrN_auxeval, run unmodified)."""
from __future__ import annotations

import json

import pytest

from evalsuite.metrics import hallusion as hb
from evalsuite.tasks.hallusion import METRICS, summarize

REF = "tests/data/hallusion"


def _load(repo_root, name):
    return json.loads((repo_root / REF / name).read_text())


@pytest.mark.parametrize("reply,expected", [
    ("correct", (1, True)), ("Incorrect.", (0, True)), ("\u201ccorrect\u201d", (1, True)),
    ("unclear", (2, True)), ("The prediction is not correct.", (1, True)),   # substring rule, as released
    ("correct or incorrect", (0, True)), ("", (2, False)), ("I don't know.", (2, False)),
    ("UNCLEAR!", (2, True)), ("The answer is right.", (2, False)),
])
def test_judge_code(reply, expected):
    assert hb.judge_code(reply) == expected


def test_judged_correct_no_figure_rule():
    assert hb.judged_correct("VS", "0", 2) and hb.judged_correct("VS", "0", 1) and not hb.judged_correct("VS", "0", 0)
    assert not hb.judged_correct("VS", "1", 2) and not hb.judged_correct("VD", "0", 2) and hb.judged_correct("VD", "0", 1)


def _s(cat, sub, set_id, fig, q, correct, key=None):
    return {"key": key or f"{cat}_{sub}_{set_id}_{fig}_{q}", "category": cat, "subcategory": sub, "set_id": set_id,
            "figure_id": fig, "question_id": q, "correct": correct}


def test_scores_hand_worked():
    # VD ocr set 0: figure 0 (q0 ok, q1 ok), figure 1 (q0 ok, q1 wrong); VS ocr set 0: figure 0 (q0 ok),
    # figure 1 (q0 wrong)
    samples = [_s("VD", "ocr", "0", "0", "0", True), _s("VD", "ocr", "0", "0", "1", True),
               _s("VD", "ocr", "0", "1", "0", True), _s("VD", "ocr", "0", "1", "1", False),
               _s("VS", "ocr", "0", "0", "0", True), _s("VS", "ocr", "0", "1", "0", False)]
    # judge mode: figures VD0 (all ok), VD1 (no), VS1 (no); VS figure 0 left out -> 1/3.
    # questions VD q0 (ok, ok), VD q1 (ok, wrong), VS q0 (ok, wrong) -> 1/3
    assert hb.released_scores(samples, "judge") == pytest.approx({"aAcc": 400 / 6, "fAcc": 100 / 3, "qAcc": 100 / 3})
    # rule mode: keys without category: figure ocr_0_0 = VD0 + VS0 (all ok), ocr_0_1 = VD1 + VS1 (no) -> 1/2;
    # questions ocr_0_0 = VD q0 x2 + VS q0 x2 (one wrong), ocr_0_1 (one wrong) -> 0
    assert hb.released_scores(samples, "rule") == pytest.approx({"aAcc": 400 / 6, "fAcc": 50.0, "qAcc": 0.0})
    for mode in ("judge", "rule"):
        got = summarize([dict(s) for s in samples], mode)
        ref = hb.released_scores(samples, mode)
        assert {k: got[k] for k in ref} == pytest.approx(ref)
    got = summarize([dict(s) for s in samples], "rule")
    # per category the groups stay inside it: VD figures 1/2, VS figures 1/2; VD questions 1/2, VS 0/1
    assert got["fAcc_VD"] == pytest.approx(50.0) and got["fAcc_VS"] == pytest.approx(50.0)
    assert got["qAcc_VD"] == pytest.approx(50.0) and got["qAcc_VS"] == pytest.approx(0.0)
    assert got["aAcc_VS"] == pytest.approx(50.0)


def test_yorn_extract_equals_vlmevalkit(repo_root):
    ref = _load(repo_root, "reference/vlmevalkit.json")
    assert len(ref["extraction"]) >= 40
    for text, expected in ref["extraction"]:
        assert hb.yorn_extract(text) == expected, text


def _judge_samples(cases, replies):
    samples = []
    for c, reply in zip(cases, replies):
        code, parsed = hb.judge_code(reply)
        samples.append({**{k: c[k] for k in ("category", "subcategory", "set_id", "figure_id", "question_id")},
                        "key": "_".join(c[k] for k in ("category", "subcategory", "set_id", "figure_id", "question_id")),
                        "code": code, "parsed": parsed,
                        "correct": hb.judged_correct(c["category"], c["figure_id"], code)})
    return samples


def test_judge_mode_equals_lmms_eval(repo_root):
    cases, ref = _load(repo_root, "cases.json"), _load(repo_root, "reference/lmms_eval.json")
    # the prompts lmms-eval sent, VD records first then VS (its order), are ours
    order = [c for c in cases if c["category"] == "VD"] + [c for c in cases if c["category"] == "VS"]
    assert ref["prompts"] == [hb.judge_prompt(c["question"], c["gt_answer_details"], c["model_prediction"])
                              for c in order]
    samples = _judge_samples(cases, [c["judge_reply"] for c in cases])
    codes = {"_".join(r[k] for k in ("category", "subcategory", "set_id", "figure_id", "question_id")):
             int(r["gpt4v_output_gpt_check"]) for r in ref["codes"]}
    assert {s["key"]: s["code"] for s in samples} == codes
    got = summarize(samples, "judge")
    for metric in ("aAcc", "fAcc", "qAcc"):
        assert round(got[metric], 4) == ref["values"][metric], metric
    assert 0 < got["unparsable"] < len(samples)


def test_rule_mode_equals_vlmevalkit(repo_root):
    cases, ref = _load(repo_root, "cases.json"), _load(repo_root, "reference/vlmevalkit.json")
    samples = []
    for c, row in zip(cases, ref["rows"]):
        rule = hb.yorn_extract(c["model_prediction"])
        assert rule == row["rule"]
        extracted, calls = rule, []
        for attempt in range(hb.MATCH_ATTEMPTS if rule == "Unknown" else 0):
            calls.append({"prompt": hb.match_prompt(c["question"], c["model_prediction"]), "temperature": 0.5 * attempt})
            extracted = hb.yorn_extract(c["match_replies"][attempt])
            if extracted != "Unknown":
                break
        assert calls == row["judge_calls"] and extracted == row["extracted"], row["index"]
        samples.append({**{k: c[k] for k in ("category", "subcategory", "set_id", "figure_id", "question_id")},
                        "key": row["index"], "correct": extracted == hb.gt_word(c["gt_answer"])})
    got = summarize(samples, "rule")
    table = {r["split"]: r for r in ref["rating"]}
    for metric in ("aAcc", "fAcc", "qAcc"):
        assert got[metric] == pytest.approx(table["Overall"][metric], abs=1e-9), metric
        for cat in hb.CATEGORIES:
            assert got[f"{metric}_{cat}"] == pytest.approx(table[cat][metric], abs=1e-9), (metric, cat)
    # the subcategory rows of the released table: the same rules on each subcategory's records
    for sub in {c["subcategory"] for c in cases}:
        mine = hb.released_scores([s for s in samples if s["subcategory"] == sub], "rule")
        assert mine == pytest.approx({m: table[sub][m] for m in ("aAcc", "fAcc", "qAcc")}, abs=1e-9), sub


def test_metric_rows_pair_by_group():
    """fAcc / qAcc rows: one per group, on its first sample, so a paired delta resamples groups."""
    samples = [_s("VD", "ocr", "0", "0", "0", True), _s("VD", "ocr", "0", "0", "1", False)]
    summarize(samples, "judge")
    assert samples[0]["values"]["fAcc"] == [0.0, 1.0] and "fAcc" not in samples[1]["values"]
    assert samples[0]["values"]["qAcc"] == [100.0, 1.0] and samples[1]["values"]["qAcc"] == [0.0, 1.0]
    assert {m.name for m in METRICS} >= {"aAcc", "fAcc", "qAcc", "aAcc_VD", "fAcc_VS", "unparsable_rate"}


def test_no_figure_only_has_no_fAcc():
    samples = [_s("VS", "map", "0", "0", "0", True), _s("VS", "map", "0", "0", "1", False)]
    assert hb.released_scores(samples, "judge") == {"aAcc": 50.0, "qAcc": 50.0}   # two questions, one right
    got = summarize(samples, "judge")
    assert "fAcc" not in got and "fAcc_VS" not in got and got["aAcc_VS"] == 50.0
