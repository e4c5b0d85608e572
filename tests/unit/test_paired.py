"""Per-sample values declared by the tasks (tasks.metric_spec, tasks.lmms_metrics) and stored with the
samples, paired deltas over them (store.paired), POPE's stored derived rows, and `evalsuite table`
agreeing with the report on which deltas are significant."""
import json
import re

import pytest

from evalsuite.store import Store
from evalsuite.store.paired import group_records, sample_runs, with_sample_stats
from evalsuite.store.table import build_table
from evalsuite.tasks import metric_spec as ms
from tests.report_data import (
    POPE_ANSWERS,
    chair_result,
    demo_store,
    mme_result,
    pope_result,
)


def _rows(records, metric, setting=None):
    return {k: row for k, (_, row) in ms.units(records, metric, setting).items()}


def test_chair_and_pope_records_become_rows_by_hand():
    """Image 0 hallucinates a cat (mentions dog, cat; GT dog): CHAIRs (1, 1), CHAIRi (1 of 2 mentions),
    Recall (1 of 1), Len (6 tokens, 1). POPE question 1 (truth no) answered yes: accuracy (0, 1),
    precision (tp 0, said yes 1), recall (tp 0, truly yes 0), F1 (0, 1, 0), model yes (1, 1)."""
    chair = chair_result(["a.png", "b.png"], {0})
    assert [_rows(chair.samples, m)["0"] for m in ("CHAIRs", "CHAIRi", "Recall", "Len")] == \
        [(1.0, 1.0), (1.0, 2.0), (1.0, 1.0), (6.0, 1.0)]
    pope = pope_result(["yes", "yes", "no"]).samples
    got = [_rows(pope, m)["pope/1"] for m in ("pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score",
                                              "model_yes_ratio")]
    assert got == [(0.0, 1.0), (0.0, 1.0), (0.0, 0.0), (0.0, 1.0, 0.0), (1.0, 1.0)]
    assert list(_rows(pope, "pope_accuracy", "popular")) == ["pope/1"]      # question i -> setting i*3//n
    directions = {m: d["direction"] for m, d in chair.extra["metric_specs"].items()}
    assert directions == {"CHAIRs": "down", "CHAIRi": "down", "Recall": "up", "Len": "none"}
    assert not next(m for m in chair.metrics if m.metric == "Len").higher_is_better   # stored as a diagnostic


def test_pope_rows_are_computed_by_the_run_and_stored(tmp_path):
    """The POPE result as the run stores it: lmms-eval's four metrics, the model's yes ratio (12 questions,
    base says yes to all: 12/12) and accuracy / F1 / yes ratio per setting; lmms-eval's pope_yes_ratio
    (the ground truth's share, 6/12) is not stored and the result says it was replaced."""
    store = _pope_store(tmp_path)
    df = store.snapshot().metrics()
    base = df[df["ckpt"] == "/c/0"]
    got = {(m, v if isinstance(v, str) else None): x for m, v, x in zip(base["metric"], base["variant"], base["value"])}
    assert got[("model_yes_ratio", None)] == 1.0 and got[("pope_accuracy", None)] == 0.5
    assert {k for k in got if k[1]} == {(m, s) for m in ("pope_accuracy", "pope_f1_score", "model_yes_ratio")
                                        for s in ("random", "popular", "adversarial")}
    assert got[("pope_f1_score", "random")] == pytest.approx(2 * 2 / (2 + 4))    # tp 2, said yes 4, truly yes 2
    assert "pope_yes_ratio" not in got
    assert store.snapshot().run_meta(df["run_id"].iloc[0])["tasks"]["pope"]["extra"]["replaced_metrics"] == \
        {"pope_yes_ratio": "model_yes_ratio"}
    diag = set(base.loc[~base["higher_is_better"].astype(bool), "metric"])
    assert diag == {"model_yes_ratio"}


def test_mme_is_scored_per_image_by_hand():
    """existence: image a both right (100*2/2 + 100 = 200), image b one right (50): mean 125;
    count: image c none right (0): total 125 + 0 = 125, as lmms-eval's mme_aggregate_results."""
    res = mme_result({("existence", "a"): (1, 1), ("existence", "b"): (1, 0), ("count", "c"): (0, 0)})
    assert res.metrics[0].value == 125.0
    units = ms.units(res.samples, "mme_perception_score")
    assert units == {"existence/existence/a": ("existence", (200.0, 1.0)),          # category / question id
                     "existence/existence/b": ("existence", (50.0, 1.0)), "count/count/c": ("count", (0.0, 1.0))}
    rows, strata, stat = ms.design(list(units.values()), "sum_of_ratios")
    assert stat(rows.sum(0)[None])[0] == 125.0 and sorted(set(strata)) == ["count", "existence"]


def _pope_store(tmp_path, answers=POPE_ANSWERS[:2]):
    store = Store(tmp_path / "s")
    for it, ans in enumerate(answers):
        store.write_run({"ckpt": f"/c/{it}", "ckpt_hash": f"h{it}", "iteration": it,
                         "parent": "/c/0" if it else None}, [pope_result(ans)])
    return store


def _stats(store, n_boot=2000):
    snap = store.snapshot()
    tidy = build_table(snap.metrics(), run_meta={m["run_id"]: m for m in snap.run_meta()}).tidy
    records = group_records(snap.sample_records(run_id=sample_runs(tidy)))
    return with_sample_stats(tidy, records, n_boot=n_boot, seed=0)


def test_pope_gets_the_models_yes_ratio_settings_and_paired_deltas(tmp_path):
    """12 questions (4 per setting, truth yes for even i). Base says yes always: accuracy 6/12, yes
    ratio 12/12. iter1 answers right except the adversarial no-questions 9 and 11: accuracy 10/12, yes
    ratio 8/12; adversarial accuracy 2/4 both times.

    Paired accuracy delta +4/12: per question the difference is +1 for i = 1, 3, 5, 7 and 0 else, so a
    replicate's delta is Binomial(12, 1/3)/12; its 2.5th and 97.5th percentiles are 1/12 and 7/12
    (P(X <= 0) = 0.008 < 0.025 < P(X <= 1) = 0.054; P(X <= 6) = 0.934 < 0.975 < P(X <= 7) = 0.981).
    Yes ratio: -4/12, significant, but a diagnostic (direction none). Adversarial accuracy: every
    question's difference is 0, so the CI is [0, 0]: not significant."""
    t = _stats(_pope_store(tmp_path))
    it1 = t[t["checkpoint"] == "1"].set_index("metric_key")
    assert "pope/pope_yes_ratio" not in set(t["metric_key"])             # the ground truth's ratio is not stored
    acc = it1.loc["pope/pope_accuracy"]
    assert acc["value"] == pytest.approx(10 / 12) and acc["delta"] == pytest.approx(4 / 12)
    assert (acc["delta_low"], acc["delta_high"]) == (pytest.approx(1 / 12), pytest.approx(7 / 12))
    assert acc["delta_method"] == "paired" and acc["n_paired"] == 12 and acc["significant"]
    assert acc["ci_source"] == "samples" and acc["ci_low"] < 10 / 12 < acc["ci_high"]
    yes = it1.loc["pope/model_yes_ratio"]
    assert (yes["value"], yes["delta"], yes["direction"], yes["significant"]) == \
        (pytest.approx(8 / 12), pytest.approx(-4 / 12), "none", True)
    adv = it1.loc["pope/pope_accuracy[adversarial]"]
    assert (adv["value"], adv["delta"], adv["delta_low"], adv["delta_high"]) == (0.5, 0.0, 0.0, 0.0)
    assert not adv["significant"]
    assert it1.loc["pope/model_yes_ratio[adversarial]"]["value"] == 1.0
    assert it1.loc["pope/pope_f1_score[random]"]["value"] == 1.0        # 2 * 2 / (2 + 2)
    settings = [k for k in it1.index if "[" in k]
    assert settings == [f"pope/{m}[{s}]" for s in ("random", "popular", "adversarial")
                        for m in ("pope_accuracy", "pope_f1_score", "model_yes_ratio")]


def test_records_without_values_say_so(tmp_path):
    """Records stored without per-sample values (a run written before tasks declared them): the stored
    CIs stay, combined as independent (MOVER), no sample CI is made up, and the row says its values are
    missing; a metric with no per-sample form (a median) says so too."""
    from evalsuite.types import MetricValue

    store = Store(tmp_path / "s")
    for it, ans in enumerate(POPE_ANSWERS[:2]):
        res = pope_result(ans)
        for s in res.samples:
            s.pop("values")
        res.metrics = [MetricValue("pope_accuracy", 0.9 - 0.1 * it, True, 12, 0.8 - 0.1 * it, 1.0 - 0.1 * it),
                       MetricValue("pope_median", 0.5, True, 12)]
        res.extra["metric_specs"]["pope_median"] = {"direction": "up", "stat": "ratio", "ci": True,
                                                    "per_sample": False}
        store.write_run({"ckpt": f"/c/{it}", "ckpt_hash": f"h{it}", "iteration": it,
                         "parent": "/c/0" if it else None}, [res])
    t = _stats(store, n_boot=200)
    acc = t[(t["checkpoint"] == "1") & (t["metric_key"] == "pope/pope_accuracy")].iloc[0]
    assert acc["delta_method"] == "independent" and acc["ci_source"] == "stored" and acc["per_sample"] == "missing"
    assert acc["delta_low"] == pytest.approx(-0.1 - 0.1 * 2 ** 0.5)
    med = t[(t["checkpoint"] == "1") & (t["metric_key"] == "pope/pope_median")].iloc[0]
    assert med["per_sample"] == "none declared" and med["delta_method"] == ""
    from evalsuite.store.table import to_markdown

    md = to_markdown(t)
    assert "per-sample values missing from the store (no sample CI, no paired Δ): pope/pope_accuracy" in md
    assert "no per-sample form (no sample CI, no paired Δ): pope/pope_median" in md


def test_table_and_report_agree_on_significance(tmp_path, capsys):
    """The same store through `evalsuite table --format json` and the report: a delta is coloured in
    the report exactly when the table calls it significant."""
    from evalsuite.cli import main
    from evalsuite.report import build_report

    store = demo_store(tmp_path)
    assert main(["table", "--store", str(store.path), "--format", "json", "--n-boot", "400"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    table = {(r["checkpoint"], r["metric_key"]): r["significant"] for r in rows if r["delta"] is not None
             and not r["task"].startswith("csr_")}
    assert any(table.values()) and not all(table.values())
    html = build_report(store, tmp_path / "r", n_boot=400).read_text()
    names = re.findall(r'<th data-type="num">([^<(]+?)(?: \(base\))?<br>', html.split('id="summary-table"')[1])
    report = {}
    for key, cells in re.findall(r'<tr data-metric="[^"]*" data-key="([^"]*)"[^>]*>(.*?)</tr>', html, flags=re.DOTALL):
        classes = re.findall(r'<td data-v="[^"]*" class="([^"]*)"', cells)
        for name, cls in zip(names[1:], classes[1:]):        # the base column has no delta
            report[(name, key)] = cls in ("better", "worse", "changed")
    shown = {k: v for k, v in table.items() if k in report}
    assert len(shown) >= 10 and shown == {k: report[k] for k in shown}
    # the three equal relevance rows are one row in the report, three in the table
    assert len([k for k in table if k[1].startswith("relevance/")]) == 3 * 2
    assert len([k for k in report if k[1].startswith("relevance/")]) == 1 * 2


def test_table_markdown_says_which_deltas_are_paired(tmp_path, capsys):
    """The notes name the paired metrics, the MOVER ones and those without a CI; a diagnostic's column
    has no arrow; significant deltas carry a star."""
    from evalsuite.cli import main

    store = demo_store(tmp_path)
    assert main(["table", "--store", str(store.path), "--n-boot", "300", "--all"]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    assert "pope/model_yes_ratio ·" in head and "chair/Len[original] ·" in head and "pope/pope_yes_ratio" not in head
    assert "Δ CI paired bootstrap over the samples both checkpoints answered (n_boot 300, seed 0): chair/CHAIRs" in out
    assert "Δ CI none (neither a stored CI nor per-sample values): csr_pairs/" in out and "]*" in out
    assert main(["table", "--store", str(store.path), "--no-samples", "--all"]) == 0
    out = capsys.readouterr().out
    assert "pope/model_yes_ratio ·" in out and "paired" not in out    # the stored rows, as written


def test_table_markdown_defaults_to_the_headline_metrics(tmp_path, capsys):
    """Issue 38: `table --format md` shows each task's lead metric (its first declared metric with a
    direction, the whole set's row) and says how to see the rest; --all shows every metric."""
    from evalsuite.cli import main

    store = demo_store(tmp_path)
    assert main(["table", "--store", str(store.path), "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    cols = [c.strip() for c in out.splitlines()[0].strip("|").split("|")][3:]
    assert cols == ["chair/CHAIRs[original] ↓", "relevance/relevance_mean ↑", "pope/pope_accuracy ↑",
                    "mme/mme_perception_score ↑", "csr_pairs/chosen_reward_mean ↑", "csr_train/final_loss ↓"]
    assert "Headline metrics only" in out and "more with --all" in out
    assert main(["table", "--store", str(store.path), "--n-boot", "50", "--all"]) == 0
    wide = capsys.readouterr().out.splitlines()[0]
    assert "chair/CHAIRi[original]" in wide and "pope/pope_accuracy[random] ↑" in wide
    assert "Headline" not in wide
