"""Judged results in `evalsuite table` / `store.compare.compare`: every judged row names its judge, a
delta or paired CI never joins two judges, and where two judges meet the row says "judge differs"."""
from __future__ import annotations

import argparse

import pytest

from evalsuite.store import Store
from evalsuite.store.compare import JUDGE_DIFFERS, compare, judge_label, split_judge
from tests.report_data import JUDGE_A, JUDGE_B, SOURCE_A, judged_store, mmhal_result

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
