"""The judging side of `hallusion` without a model: the judge's temperature override and shared server
(evalsuite/judge/judge.py), rule mode's attempts (only Unknown answers asked, again while Unknown, at
temperature + 0.5 per attempt) and the unparsable counts and failure in both modes."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from evalsuite.errors import RunFailure
from evalsuite.judge.config import JudgeConfig
from evalsuite.judge.judge import Judge
from evalsuite.metrics import hallusion as hb
from evalsuite.tasks.base import Plan
from evalsuite.tasks.hallusion import METRICS, HallusionTask
from tests.judge_fake import FakeJudge


def test_temperature_override_is_sent_and_keyed(tmp_path):
    with FakeJudge(reply=lambda m: "Yes") as fake:
        judge = Judge.resolve(JudgeConfig(model="judge-a", url=fake.url), "test")
        reqs = [[{"role": "user", "content": f"q{i}"}] for i in range(3)]
        judge.ask(reqs, tmp_path, "t", "p", None)
        judge.ask(reqs, tmp_path, "t", "p", None, temperature=0.5)
        assert [r["temperature"] for r in fake.requests] == [0.0] * 3 + [0.5] * 3
        judge.ask(reqs, tmp_path, "t", "p", None, temperature=0.5)     # cached under its own key
        assert len(fake.requests) == 6 and judge.stats == {"asked": 0, "cached": 3}


def test_session_serves_once(tmp_path, monkeypatch):
    """Inside session() the asks share one server: a local judge would start once."""
    with FakeJudge(reply=lambda m: "Yes") as fake:
        judge = Judge.resolve(JudgeConfig(model="judge-a", url=fake.url), "test")
        opened = []
        real = judge._serving

        def counting(log_dir):
            opened.append(log_dir)
            return real(log_dir)

        monkeypatch.setattr(judge, "_serving", counting)
        with judge.session():
            judge.ask([[{"role": "user", "content": "a"}]], None, "t", "p", None)
            judge.ask([[{"role": "user", "content": "b"}]], None, "t", "p", None, temperature=0.5)
            judge.ask([[{"role": "user", "content": "b"}]], tmp_path, "t", "p", None)
        assert len(opened) == 1 and len(fake.requests) == 3
        judge.ask([[{"role": "user", "content": "c"}]], None, "t", "p", None)   # outside: its own
        assert len(opened) == 2


class StubJudge:
    """Answers each prompt from `script` (prompt -> replies, one per time it is asked)."""

    def __init__(self, script, temperature=0.0):
        self.script, self.asked = script, []
        self.config = SimpleNamespace(temperature=temperature)
        self.stats = {"asked": 0, "cached": 0}

    def session(self):
        return contextlib.nullcontext(self)

    def ask(self, requests, cache_root, task, version, log_dir, temperature=None):
        out = []
        for r in requests:
            prompt = r[0]["content"]
            self.asked.append((prompt, temperature))
            n = sum(p == prompt for p, _ in self.asked) - 1
            out.append({"content": self.script(prompt, n), "model": "stub"})
        self.stats = {"asked": len(requests), "cached": 0}
        return out


def _run(mode, answers, judge, records=None):
    records = records or [{"category": "VD", "subcategory": "ocr", "set_id": "0", "figure_id": str(i % 2),
                           "question_id": str(i // 2), "visual_input": "1", "question": f"Q{i}",
                           "gt_answer_details": f"D{i}", "gt_answer": "1", "filename": f"f{i}.png",
                           "key": f"VD_ocr_0_{i % 2}_{i // 2}"} for i in range(len(answers))]
    plan = Plan("hallusion", "1", {}, {"mode": mode, "n_boot": 0, "seed": 0, "judge": {}},
                state={"items": records, "judge": judge, "skipped": 0}, specs=METRICS)
    ans = [{"key": str(i), "answer": a} for i, a in enumerate(answers)]
    ctx = SimpleNamespace(resume_root=None, output_dir=None)
    return HallusionTask().judged(ctx, plan, ans)


def test_rule_mode_attempts():
    replies = {"Q1": ["Unknown", "yes"], "Q2": ["???", "", "maybe", "Unknown", "hm"], "Q3": ["No."]}

    def script(prompt, n):
        q = prompt.rsplit("Question: ", 1)[1].split("?\nAnswer: ", 1)[0]
        return replies[q][n]

    judge = StubJudge(script, temperature=0.2)
    res = _run("rule", ["Yes, it is.", "I am not sure", "hmm", "Cannot tell"], judge)
    # Q0 is read by the rule; Q1 needs two attempts, Q2 all five, Q3 one
    assert [(p.rsplit("Question: ", 1)[1][:2], t) for p, t in judge.asked] == [
        ("Q1", 0.2), ("Q2", 0.2), ("Q3", 0.2), ("Q1", 0.7), ("Q2", 0.7), ("Q2", 1.2), ("Q2", 1.7), ("Q2", 2.2)]
    assert judge.asked[0][0] == hb.match_prompt("Q1", "I am not sure")
    s = {x["question"]: x for x in res.samples}
    assert [s[q]["extracted"] for q in ("Q0", "Q1", "Q2", "Q3")] == ["Yes", "Yes", "Unknown", "No"]
    assert [s[q]["correct"] for q in ("Q0", "Q1", "Q2", "Q3")] == [True, True, False, False]
    assert "parsed" not in s["Q0"] and s["Q1"]["parsed"] and not s["Q2"]["parsed"] and s["Q3"]["parsed"]
    assert res.extra["judged"] == 3 and res.extra["unparsable"] == 1
    values = {m.metric: m.value for m in res.metrics}
    assert values["aAcc"] == pytest.approx(50.0) and values["unparsable_rate"] == pytest.approx(100 / 3 / 100)


def test_judge_mode_codes_and_failure():
    judge = StubJudge(lambda prompt, n: {"0": "correct", "1": "Incorrect", "2": "unclear", "3": "??"}[
        prompt.split("Question:Q", 1)[1][0]])
    res = _run("judge", ["a", "b", "c", "d"], judge)
    assert [x["judge_code"] for x in res.samples] == [1, 0, 2, 2]
    assert [x["parsed"] for x in res.samples] == [True, True, True, False]
    assert res.extra["unparsable"] == 1 and res.extra["released"]["aAcc"] == 25.0
    bad = StubJudge(lambda prompt, n: "no idea" if "Q0" not in prompt else "correct")
    with pytest.raises(RunFailure, match=r"hallusion: 3 of 4 judge replies say none of correct / incorrect / unclear"):
        _run("judge", ["a", "b", "c", "d"], bad)
    half = StubJudge(lambda prompt, n: "no idea" if prompt.split("Question:Q", 1)[1][0] in "01" else "correct")
    assert _run("judge", ["a", "b", "c", "d"], half).extra["unparsable"] == 2     # half is not more than half
