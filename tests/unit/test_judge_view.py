"""Judged results in `evalsuite table` / `store.compare.compare`: every judged row names its judge, a
delta or paired CI never joins two judges, and where two judges meet the row says "judge differs"."""
from __future__ import annotations

import argparse

import pytest

from evalsuite.store import Store
from evalsuite.store.compare import JUDGE_DIFFERS, compare, judge_label, split_judge
from evalsuite.tasks.metric_spec import score, specs_extra
from evalsuite.tasks.mmhal import METRICS as MMHAL_METRICS
from evalsuite.types import MetricValue, TaskResult

WEIGHTS_A = "a1b2c3d4e5f60718"
JUDGE_A = {"kind": "local", "weights": WEIGHTS_A, "prompt_files": "p0", "server": "vllm-0.11",
           "serve_args": [], "temperature": 0.0, "max_tokens": 512}
JUDGE_B = {"kind": "server", "model": "judge-<b>", "served": {"id": "judge-<b>", "root": "/m/qwen"},
           "temperature": 0.0, "max_tokens": 512}
SOURCE_A = "/judges/qwen-judge-a/"


def mmhal_result(ratings: list[int], judge: dict, source: str) -> TaskResult:
    """An mmhal result as the task stores it: ratings per question (two question types), the judge in the
    identity (with the prompt version) and its description in the config."""
    samples = [{"key": str(i), "image_id": f"img{i}", "prompt": "What is shown?", "answer": "a dog",
                "question_type": ("attribute", "counting")[i % 2], "rating": r, "parsed": True,
                "judge_text": f"rating: {r}"} for i, r in enumerate(ratings)]
    metrics = score(samples, MMHAL_METRICS, n_boot=200, seed=0)
    identity = {"data": "d0", "images": "i0", "n": len(samples), "judge": {**judge, "prompt": "mmhal-llava-rlhf-1"}}
    return TaskResult("mmhal", "1", metrics, samples=samples, config={"judge": {**judge, "source": source}},
                      identity=identity, extra={"metric_specs": specs_extra(MMHAL_METRICS)})


def chair_plain(v: float) -> TaskResult:
    return TaskResult("chair", "1", [MetricValue("CHAIRs", v, False, 8, v - 0.05, v + 0.05)], identity={"n": 8})


def judged_store(tmp_path) -> Store:
    """Lineage c0 -> c1 -> c2. mmhal: c0 and c1 judged by local judge A (mean 2.0 -> 3.0 over 8 questions,
    every rating +1), c1 also by server judge B, c2 by judge B only; chair (no judge) in every one."""
    store = Store(tmp_path / "s")
    base = [2, 1, 3, 2, 2, 1, 3, 2]
    runs = {0: [("A", base)], 1: [("A", [r + 1 for r in base]), ("B", [r + 2 for r in base])],
            2: [("B", [r + 3 for r in base])]}
    for it, judged in runs.items():
        for which, ratings in judged:
            judge, source = (JUDGE_A, SOURCE_A) if which == "A" else (JUDGE_B, "http://127.0.0.1:8000/v1")
            store.write_run({"ckpt": f"/c/{it}", "ckpt_hash": f"h{it}", "iteration": it,
                             "parent": f"/c/{it - 1}" if it else None},
                            [mmhal_result(ratings, judge, source)] + ([chair_plain(0.5 - 0.1 * it)] if which == "A"
                                                                      or it == 2 else []))
    return store


def test_split_judge_finds_the_judge_at_any_level_and_labels_are_short():
    assert split_judge({"n": 1, "judge": {"kind": "local"}}) == ({"kind": "local"}, {"n": 1})
    assert split_judge({"lmms": {"task": "mmvet", "judge": {"model": "m"}}, "n": 1}) == \
        ({"model": "m"}, {"lmms": {"task": "mmvet"}, "n": 1})
    assert split_judge({"judge": "clip", "n": 1}) == (None, {"judge": "clip", "n": 1})   # not a judge description
    assert judge_label(JUDGE_A, {"source": SOURCE_A}) == "qwen-judge-a@a1b2c3d4"
    assert judge_label(JUDGE_A) == "local@a1b2c3d4"
    assert judge_label(JUDGE_B) == "judge-<b> (/m/qwen)"


def test_compare_with_two_judges_names_them_and_never_pairs_them(tmp_path):
    """mmhal/score: c1 under judge A has the paired delta +1.0 vs c0 (every question +1: CI [1, 1]);
    c1 and c2 under judge B have no base under B: no delta, "judge differs" naming the base's judge A.
    chair carries no judge and keeps its deltas."""
    tidy = compare(judged_store(tmp_path).snapshot(), n_boot=200, seed=0).tidy
    score_rows = tidy[tidy["metric_key"] == "mmhal/score"]
    got = {(r.checkpoint, r.judge): r for r in score_rows.itertuples()}
    assert set(got) == {("0", "qwen-judge-a@a1b2c3d4"), ("1", "qwen-judge-a@a1b2c3d4"),
                        ("1", "judge-<b> (/m/qwen)"), ("2", "judge-<b> (/m/qwen)")}
    same = got[("1", "qwen-judge-a@a1b2c3d4")]
    assert same.delta == pytest.approx(1.0) and same.delta_method == "paired" and same.n_paired == 8
    assert same.delta_low == pytest.approx(1.0) and same.delta_high == pytest.approx(1.0)
    assert same.delta_note == ""
    for c in ("1", "2"):
        other = got[(c, "judge-<b> (/m/qwen)")]
        assert pd_isna(other.delta) and pd_isna(other.delta_low) and other.delta_method == ""
        assert other.delta_note == JUDGE_DIFFERS and other.base_judge == "qwen-judge-a@a1b2c3d4"
    chair = tidy[tidy["task"] == "chair"]
    assert chair["judge"].isna().all() and (chair["delta_note"] == "").all()
    assert chair.loc[chair["checkpoint"] == "2", "delta"].iloc[0] == pytest.approx(-0.2)


def test_two_judges_of_one_model_get_two_labels(tmp_path):
    """Judge A at temperature 0 and at 0.7 (same weights, same folder): two judges, two labels."""
    store = Store(tmp_path / "s")
    for it, temp in ((0, 0.0), (1, 0.7)):
        store.write_run({"ckpt": f"/c/{it}", "ckpt_hash": f"h{it}", "iteration": it, "parent": "/c/0" if it else None},
                        [mmhal_result([2, 3, 4, 1], {**JUDGE_A, "temperature": temp}, SOURCE_A)])
    tidy = compare(store.snapshot(), n_boot=50).tidy
    labels = set(tidy["judge"])
    assert len(labels) == 2 and all(lab.startswith("qwen-judge-a@a1b2c3d4 #") for lab in labels)
    assert set(tidy.loc[tidy["checkpoint"] == "1", "delta_note"]) == {JUDGE_DIFFERS}


def test_table_command_shows_the_judge_and_judge_differs(tmp_path, capsys):
    from evalsuite.commands.table import main

    store = judged_store(tmp_path)
    args = argparse.Namespace(store=str(store.path), metric=["mmhal/score"], format="md", all=False, as_of=None,
                              run=None, base=None, list_versions=False, samples=True, n_boot=200, seed=0,
                              by="checkpoint", task=None, variant=None, vs=None, top=None)
    assert main(args) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("| ")]
    assert "judge" in lines[0].split(" | ")
    # a judged setup is labelled by its judge, not by the judge's identity fields
    assert "judge.kind" not in out and "setup" in lines[0] and "judge='qwen-judge-a@a1b2c3d4'" in out
    row = next(ln for ln in lines if ln.startswith("| 2 ") and "judge-<b>" in ln)
    assert "Δ judge differs" in row and "Δ +" not in row
    row = next(ln for ln in lines if ln.startswith("| 1 ") and "qwen-judge-a@a1b2c3d4" in ln)
    assert "Δ +1.000 [+1.000, +1.000]*" in row
    assert "Δ judge differs: the base was scored by another judge" in out
    args.format = "csv"
    assert main(args) == 0
    csv = capsys.readouterr().out
    head = csv.splitlines()[0].split(",")
    assert {"judge", "delta_note", "base_judge"} <= set(head)
    assert "judge differs" in csv and "judge-<b> (/m/qwen)" in csv


def pd_isna(x) -> bool:
    import pandas as pd

    return bool(pd.isna(x))
