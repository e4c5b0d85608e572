"""lmms-eval's results dict -> TaskResults, and store run ids for group leaves (no lmms_eval import)."""
from __future__ import annotations

import json

import pytest

from evalsuite.run import store_run_id
from evalsuite.lmms.task import Leaf, LmmsSpec
from evalsuite.lmms.results import merge_layout, to_task_results


def _raw() -> dict:
    """A group `grp` of leaves a (2 of 3 docs scored) and b (2 of 2), which lmms-eval aggregated
    (acc mean weighted by size: (0.5*2 + 1.0*2) / 4 = 0.75)."""
    def rows(scores):
        return [{"doc_id": i, "doc": {"question_id": f"q{i}"}, "arguments": [["prompt", {}]],
                 "filtered_resps": ["A"], "target": "A", "acc": s} for i, s in enumerate(scores)]

    return {
        "results": {"grp": {"alias": "grp", "acc,none": 0.75, "acc_stderr,none": "N/A"},
                    "a": {"alias": " - a", "acc,none": 0.5, "acc_stderr,none": 0.5},
                    "b": {"alias": " - b", "acc,none": 1.0, "acc_stderr,none": 0.0}},
        "group_subtasks": {"grp": ["b", "a"], "a": [], "b": []},
        "configs": {"a": {"task": "a", "metadata": [{"version": 1.0}]}, "b": {"task": "b"}},
        "versions": {"grp": 2, "a": "Yaml", "b": 0},
        "higher_is_better": {"a": {"acc": True}, "b": {"acc": True}, "grp": {"acc": True}},
        "n-samples": {"a": {"original": 3, "effective": 2}, "b": {"original": 2, "effective": 2}},
        "samples": {"a": rows([0.0, 1.0]), "b": rows([1.0, 1.0])},
        "config": {"model": "evalsuite", "limit": 2},
    }


def _spec() -> LmmsSpec:
    leaves = [Leaf("a", "grp/a", "a", source="/d/a.parquet", data_id="da"),
              Leaf("b", "grp/b", "b", source="hub:org/b", data_id="db")]
    return LmmsSpec("grp", "grp", "group", ["grp"], leaves, builtin=True)


def test_group_leaves_and_aggregate():
    res = to_task_results(_spec(), _raw(), {"generated": 4, "cached": 0}, gen_kwargs=None, limit=2,
                          bootstrap_iters=0)
    assert [r.task for r in res] == ["grp/a", "grp/b", "grp"]
    a, b, grp = res
    assert [(m.metric, m.value, m.n, m.stderr) for m in a.metrics] == [("acc", 0.5, 2, 0.5)]
    assert a.version == "1.0" and b.version == "0"
    assert a.config["data_source"] == "/d/a.parquet" and (a.config["n"], a.config["n_total"]) == (2, 3)
    assert a.identity == {"lmms_task": "a", "data": "da", "limit": 2, "gen_kwargs": None}
    assert [s["key"] for s in a.samples] == ["grp/a/0", "grp/a/1"]
    # the aggregate: n = 2 + 2 documents behind it, no stderr ("N/A"), no samples of its own
    assert [(m.metric, m.value, m.n, m.stderr) for m in grp.metrics] == [("acc", 0.75, 4, None)]
    assert grp.samples == [] and grp.config["members"] == ["grp/b", "grp/a"] and grp.version == "2"
    assert grp.identity["members"] == sorted([("grp/a", a.eval_key), ("grp/b", b.eval_key)])


def test_single_task_keeps_the_users_name():
    raw = _raw()
    raw = {**raw, "results": {"a": raw["results"]["a"]}, "group_subtasks": {"a": []}, "samples": {"a": raw["samples"]["a"]}}
    spec = LmmsSpec("mine", "a", "task", ["a"], [Leaf("a", "mine", "mine", source="/d/a.parquet")])
    (res,) = to_task_results(spec, raw, {}, gen_kwargs="max_new_tokens=3", limit=None, bootstrap_iters=100)
    assert res.task == "mine" and res.config["group"] is None and res.identity["gen_kwargs"] == {"max_new_tokens": 3}


def test_layout_merges_calls_without_samples(tmp_path):
    layout: dict = {}
    path = tmp_path / "lmms_results.json"
    merge_layout(layout, _raw(), path)
    second = {"results": {"c": {"acc,none": 0.1}}, "versions": {"c": 0}, "n-samples": {"c": {"effective": 1}},
              "samples": {"c": []}, "config": {"model": "evalsuite", "limit": None}}
    merge_layout(layout, second, path)
    on_disk = json.loads(path.read_text())
    assert sorted(on_disk["results"]) == ["a", "b", "c", "grp"] and "samples" not in on_disk
    assert on_disk["results"]["a"]["acc,none"] == 0.5 and on_disk["config"]["limit"] is None


@pytest.mark.parametrize("task,expected", [("pope", "R-pope"), ("pope_full/pope_adv", "R-pope_full.pope_adv"),
                                           ("a b/c", "R-a.b.c")])
def test_store_run_ids_have_no_slash(task, expected):
    assert store_run_id("R", task, set()) == expected


def test_store_run_ids_stay_unique():
    used: set[str] = set()
    assert [store_run_id("R", t, used) for t in ("g/a", "g.a", "g/a")] == ["R-g.a", "R-g.a.2", "R-g.a.3"]


def test_pope_rows_are_stored_by_the_conversion():
    """lmms-eval's POPE results over 6 questions (2 per setting; truth yes for even i; the model says yes
    to all): the TaskResult the run stores has lmms-eval's accuracy 0.5, model_yes_ratio 1.0 and, per
    setting, accuracy 0.5 and F1 2*1/(2+1) = 2/3; lmms-eval's pope_yes_ratio (the truth's) is replaced."""
    settings = ("random", "random", "popular", "popular", "adversarial", "adversarial")
    rows = []
    for i, cat in enumerate(settings):
        truth = "yes" if i % 2 == 0 else "no"
        res = {"question_id": str(i), "score": float(truth == "yes"), "prediction": "yes", "ground_truth": truth}
        rows.append({"doc_id": i, "doc": {"question_id": str(i), "category": cat}, "arguments": [["q", {}]],
                     "filtered_resps": ["yes"], "target": truth,
                     **{m: dict(res) for m in ("pope_accuracy", "pope_f1_score", "pope_yes_ratio")}})
    raw = {"results": {"evalsuite_pope": {"pope_accuracy,none": 0.5, "pope_f1_score,none": 2 / 3,
                                          "pope_yes_ratio,none": 0.5}},
           "group_subtasks": {"evalsuite_pope": []}, "higher_is_better": {"evalsuite_pope": {}},
           "n-samples": {"evalsuite_pope": {"original": 6, "effective": 6}}, "samples": {"evalsuite_pope": rows}}
    spec = LmmsSpec("pope", "evalsuite_pope", "task", ["evalsuite_pope"], [Leaf("evalsuite_pope", "pope", "pope")])
    (res,) = to_task_results(spec, raw, {}, gen_kwargs=None, limit=None, bootstrap_iters=0)
    got = {(m.metric, m.variant): m.value for m in res.metrics}
    assert got.pop(("pope_accuracy", None)) == 0.5 and got.pop(("model_yes_ratio", None)) == 1.0
    assert got.pop(("pope_f1_score", None)) == pytest.approx(2 / 3)
    # lmms-eval reported no precision/recall here: the specs compute them (tp 3 of 6 yes said, of 3 truly yes)
    assert (got.pop(("pope_precision", None)), got.pop(("pope_recall", None))) == (0.5, 1.0)
    assert got == {**{("pope_accuracy", s): 0.5 for s in settings},
                   **{("model_yes_ratio", s): 1.0 for s in settings},
                   **{("pope_f1_score", s): pytest.approx(2 / 3) for s in settings}}
    assert res.extra["replaced_metrics"] == {"pope_yes_ratio": "model_yes_ratio"}
    assert res.extra["metric_specs"]["model_yes_ratio"]["direction"] == "none"
    assert res.samples[1]["values"]["pope_accuracy"] == [0.0, 1.0] and res.samples[1]["value_subset"] == "random"
