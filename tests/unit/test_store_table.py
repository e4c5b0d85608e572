"""`evalsuite table`: latest value per checkpoint, base choice, delta CIs, formats, version selector."""
from __future__ import annotations

import argparse
import json
import math

import pytest

from evalsuite.errors import UserError
from evalsuite.store import Store
from evalsuite.store.table import delta_ci, fmt, tidy_table
from evalsuite.types import MetricValue, TaskResult


def write(store, it, chair_s, f1_se=0.01, ckpt=None, **kw):
    results = [TaskResult("chair", "1", [MetricValue("CHAIRs", chair_s, False, n=100,
                                                     ci_low=chair_s - 0.05, ci_high=chair_s + 0.05)]),
               TaskResult("pope", "1", [MetricValue("f1", 0.8 + 0.01 * (it or 0), True, n=300, stderr=f1_se,
                                                    variant="random")])]
    kw.setdefault("parent", f"/ck/iter{it - 1}" if it else None)    # one lineage: iter_t's parent is iter_{t-1}
    return store.write_run({"ckpt": ckpt or f"/ck/iter{it}", "ckpt_hash": f"h-{ckpt or it}", "iteration": it,
                            "method": "csr", "config": {}, **kw}, results)


def args(store, **kw):
    base = dict(store=str(store), metric=None, format="md", as_of=None, run=None, list_versions=False, base=None,
                samples=True, n_boot=1000, seed=0, all=False)
    return argparse.Namespace(**{**base, **kw})


def test_mover_delta_ci_by_hand():
    """a = 0.4 [0.35, 0.45], b = 0.5 [0.45, 0.55]: d = -0.1,
    low = -0.1 - sqrt(0.05^2 + 0.05^2) = -0.170711, high = -0.1 + sqrt(0.05^2 + 0.05^2) = -0.029289."""
    lo, hi = delta_ci(0.4, (0.35, 0.45), 0.5, (0.45, 0.55))
    assert lo == pytest.approx(-0.1 - math.sqrt(0.005)) and hi == pytest.approx(-0.1 + math.sqrt(0.005))
    assert delta_ci(0.4, (None, None), 0.5, (0.45, 0.55)) == (None, None)


def test_base_is_iteration_zero_and_rows_follow_iteration(tmp_path):
    """Written out of order (2, 0, 1): rows come back 0, 1, 2 and the base is iteration 0.
    f1 has only stderr 0.01: CI = value +- 0.0196; delta CI half-width = sqrt(2) * 0.0196 = 0.027719."""
    store = Store(tmp_path)
    for it, cs in ((2, 0.3), (0, 0.5), (1, 0.4)):
        write(store, it, cs)
    t = tidy_table(store.snapshot().metrics())
    assert list(dict.fromkeys(t["checkpoint"])) == ["iter0", "iter1", "iter2"]
    assert t.loc[t["is_base"], "checkpoint"].unique().tolist() == ["iter0"]
    f1 = t[(t["checkpoint"] == "iter2") & (t["metric"] == "f1")].iloc[0]
    assert f1["metric_key"] == "pope/f1[random]"
    assert f1["ci_low"] == pytest.approx(0.82 - 0.0196) and f1["delta"] == pytest.approx(0.02)
    assert f1["delta_high"] - f1["delta"] == pytest.approx(math.sqrt(2) * 0.0196)
    cs = t[(t["checkpoint"] == "iter1") & (t["metric"] == "CHAIRs")].iloc[0]
    assert cs["delta"] == pytest.approx(-0.1) and cs["delta_low"] == pytest.approx(-0.1 - math.sqrt(0.005))


def test_base_without_iteration_zero_is_the_earliest(tmp_path):
    store = Store(tmp_path)
    write(store, 3, 0.3, parent="/ck/iter1")
    write(store, 1, 0.5)
    t = tidy_table(store.snapshot().metrics())
    assert t.loc[t["is_base"], "checkpoint"].iloc[0] == "iter1"


def test_reevaluation_supersedes_and_version_shows_the_old_value(tmp_path, capsys):
    store = Store(tmp_path)
    write(store, 0, 0.5)
    write(store, 1, 0.4)
    write(store, 1, 0.2)                # iteration 1 re-evaluated: the table shows 0.2 now
    latest = tidy_table(store.snapshot().metrics(), ["CHAIRs"])
    assert latest[latest["checkpoint"] == "iter1"]["value"].tolist() == [0.2]
    older = tidy_table(store.snapshot().metrics(as_of=2), ["CHAIRs"])
    assert older[older["checkpoint"] == "iter1"]["value"].tolist() == [0.4]
    from evalsuite.commands import table

    assert table.main(args(tmp_path, metric=["chair/*"], as_of="2")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| checkpoint | iter | method | chair/CHAIRs ↓ |"
    assert out[2] == "| iter0 (base) | 0 | csr | 0.500 [0.450, 0.550] (n=100) |"
    assert out[3] == "| iter1 | 1 | csr | 0.400 [0.350, 0.450] Δ -0.100 [-0.171, -0.029]* (n=100) |"


def test_metric_filter_and_unknown_metric(tmp_path):
    store = Store(tmp_path)
    write(store, 0, 0.5)
    assert set(tidy_table(store.snapshot().metrics(), ["f1"])["metric_key"]) == {"pope/f1[random]"}
    assert set(tidy_table(store.snapshot().metrics(), ["pope/*", "CHAIRs"])["metric_key"]) == {"pope/f1[random]", "chair/CHAIRs"}
    with pytest.raises(UserError, match="--metric 'bleu': no such metric.*chair/CHAIRs"):
        tidy_table(store.snapshot().metrics(), ["bleu"])


def test_csv_json_and_list_versions(tmp_path, capsys):
    from evalsuite.commands import table

    store = Store(tmp_path)
    r0 = write(store, 0, 0.5)
    write(store, 1, 0.4)
    table.main(args(tmp_path, format="json"))
    doc = json.loads(capsys.readouterr().out)
    assert doc["base"] == "iter0" and len(doc["rows"]) == 4
    row = next(r for r in doc["rows"] if r["checkpoint"] == "iter1" and r["metric"] == "CHAIRs")
    assert row["delta"] == pytest.approx(-0.1) and row["higher_is_better"] is False
    table.main(args(tmp_path, format="csv"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("checkpoint,iteration,method,ckpt,ckpt_hash,run_id,metric_key")
    assert len(lines) == 5
    table.main(args(tmp_path, list_versions=True))
    listing = capsys.readouterr().out
    assert r0 in listing and "/ck/iter1" in listing


def test_same_basename_checkpoints_are_told_apart(tmp_path):
    store = Store(tmp_path)
    write(store, 0, 0.5, ckpt="/a/run1")
    write(store, 1, 0.4, ckpt="/b/run1")
    names = set(tidy_table(store.snapshot().metrics())["checkpoint"])
    assert len(names) == 2 and all(n.startswith("run1@") for n in names)


def test_a_generic_folder_name_is_named_with_its_parent(tmp_path):
    """Issue 38: .../iter_2/merged reads "iter_2/merged", not "merged"."""
    store = Store(tmp_path)
    write(store, 0, 0.5, ckpt="/runs/csr/iter_1/merged")
    write(store, 1, 0.4, ckpt="/runs/csr/iter_2/merged")
    assert set(tidy_table(store.snapshot().metrics())["checkpoint"]) == {"iter_1/merged", "iter_2/merged"}


def test_missing_store_is_a_user_error(tmp_path):
    from evalsuite.commands import table

    with pytest.raises(UserError, match="no results store there"):
        table.main(args(tmp_path / "nothing"))


def test_fmt():
    assert [fmt(0.5), fmt(-0.0123, True), fmt(12.345), fmt(666.0), fmt(1500.2), fmt(None)] == \
        ["0.500", "-0.012", "12.35", "666", "1500", "-"]


def chair(value, prompt="A", n_images=4, **ident):
    return TaskResult("chair", "1", [MetricValue("CHAIRs", value, False, n=n_images, ci_low=value - 0.05,
                                                 ci_high=value + 0.05)],
                      identity={"split": "val", "prompt": prompt, "n_images": n_images,
                                "image_ids": list(range(n_images)), **ident})


def put(store, it, results, **kw):
    kw.setdefault("parent", f"/ck/iter{it - 1}" if it else None)
    return store.write_run({"ckpt": f"/ck/iter{it}", "ckpt_hash": f"h-{it}", "iteration": it, "method": "csr",
                            "data_root": "/data/world", "config": {"limit": 8}, **kw}, results)


def test_a_checkpoint_evaluated_two_ways_gives_two_rows_and_no_cross_delta(tmp_path, capsys):
    """iter0 with prompts A (0.5) and B (0.3), iter1 with A only (0.4): iter1's delta is 0.4 - 0.5 =
    -0.1 against A; nothing is compared with B (0.4 - 0.3 would be +0.1). The same with n_images."""
    from evalsuite.commands import table

    store = Store(tmp_path)
    put(store, 0, [chair(0.5, "A")])
    put(store, 0, [chair(0.3, "B")])
    put(store, 0, [chair(0.25, "A", n_images=8)])
    put(store, 1, [chair(0.4, "A")])
    t = tidy_table(store.snapshot().metrics())
    assert list(zip(t["checkpoint"], t["setup"], t["value"])) == [
        ("iter0", "prompt='A', n_images=4", 0.5), ("iter0", "prompt='B', n_images=4", 0.3),
        ("iter0", "prompt='A', n_images=8", 0.25), ("iter1", "prompt='A', n_images=4", 0.4)]
    assert t["delta"].iloc[:3].isna().all() and t["delta"].iloc[3] == pytest.approx(-0.1)
    assert t["eval_key"].nunique() == 3 and (t["base"] == "iter0").all()
    assert table.main(args(tmp_path)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| checkpoint | iter | method | setup | chair/CHAIRs ↓ |"
    assert out[3] == "| iter0 (base) | 0 | csr | prompt='B', n_images=4 | 0.300 [0.250, 0.350] (n=4) |"
    assert out[5] == ("| iter1 | 1 | csr | prompt='A', n_images=4 | "
                      "0.400 [0.350, 0.450] Δ -0.100 [-0.171, -0.029]* (n=4) |")
    assert out[-1] == "Every row: data /data/world, limit 8."
    table.main(args(tmp_path, format="json"))
    doc = json.loads(capsys.readouterr().out)
    assert doc["base"] == "iter0" and doc["rows"][1]["eval_setup"]["prompt"] == "B"


def test_one_setup_per_task_means_no_label(tmp_path):
    store = Store(tmp_path)
    put(store, 0, [chair(0.5)])
    put(store, 1, [chair(0.4)])
    t = tidy_table(store.snapshot().metrics())
    assert list(t["setup"]) == ["", ""] and t["delta"].iloc[1] == pytest.approx(-0.1)


def test_setups_differing_only_in_long_values_are_abbreviated():
    from evalsuite.store.setups import label_setups

    labels = label_setups({"k1": {"ids": [1, 2, 3], "data": "a" * 64}, "k2": {"ids": [1, 2, 4], "data": "a" * 64}})
    assert labels["k1"].startswith("ids=[3 items #") and labels["k1"] != labels["k2"]
    assert label_setups({"k1": {"x": 1}}) == {"k1": ""}
    assert label_setups({"k1": {}, "k2": {}}) == {"k1": "setup k1", "k2": "setup k2"}


def test_unrelated_checkpoints_get_no_delta_unless_a_base_is_named(tmp_path, capsys):
    """Two lineages (iter0 -> iter1, and an unrelated model): deltas only inside the first; with
    --base other every checkpoint is compared with 'other' (0.5 - 0.45 = +0.05 for iter0)."""
    from evalsuite.commands import table

    store = Store(tmp_path)
    put(store, 0, [chair(0.5)])
    put(store, 1, [chair(0.4)])
    store.write_run({"ckpt": "/elsewhere/other", "ckpt_hash": "h-x", "iteration": 0}, [chair(0.45)])
    t = tidy_table(store.snapshot().metrics())
    assert list(t["checkpoint"]) == ["iter0", "iter1", "other"]      # lineages kept together
    assert list(t["is_base"]) == [True, False, False] and pd_isna(t["delta"].iloc[2]) and pd_isna(t["base"].iloc[2])
    table.main(args(tmp_path))
    assert "No Δ for other: no other checkpoint of its lineage" in capsys.readouterr().out
    t = tidy_table(store.snapshot().metrics(), base="other")
    assert t["delta"].iloc[0] == pytest.approx(0.05) and list(t["is_base"]) == [False, False, True]
    assert tidy_table(store.snapshot().metrics(), base="h-x")["base"].tolist() == ["other"] * 3
    with pytest.raises(UserError, match="--base 'nope': no such checkpoint; have: iter0, iter1, other"):
        tidy_table(store.snapshot().metrics(), base="nope")


def pd_isna(x) -> bool:
    import pandas as pd

    return bool(pd.isna(x))


def test_pair_statistics_sit_on_their_generator_without_renaming_it(tmp_path):
    """CSR writes iteration 1's pairs after the base's evaluation, under the base (its generator),
    with no label of its own: the base keeps its name and iteration, and the pair rows compare
    with iteration 2's pairs (generated by iter1) in one setup."""
    store = Store(tmp_path)
    put(store, 0, [chair(0.5)], label="demo/base")
    for t in (1, 2):
        pairs = TaskResult("csr_pairs", "1", [MetricValue("reward_gap", 0.4 - 0.1 * t, True, n=10)],
                           identity={"reward": {"lam": 1.0}})
        put(store, t - 1, [pairs], generator=f"h-{t - 1}", label=None)
        put(store, t, [chair(0.5 - 0.1 * t)], label=f"demo/iter_{t}")
    t = tidy_table(store.snapshot().metrics())
    gap = t[t["metric"] == "reward_gap"]
    assert list(gap["checkpoint"]) == ["demo/base", "demo/iter_1"] and list(gap["iteration"]) == [0, 1]
    assert list(gap["generator"]) == ["h-0", "h-1"] and gap["delta"].iloc[1] == pytest.approx(-0.1)
    assert list(dict.fromkeys(t["checkpoint"])) == ["demo/base", "demo/iter_1", "demo/iter_2"]


def test_a_relative_parent_links_to_the_checkpoint_at_that_path(tmp_path):
    """A manifest written from /work holds parent 'runs/x/iter0'; the evaluated path is absolute."""
    store = Store(tmp_path)
    store.write_run({"ckpt": "/work/runs/x/iter0", "ckpt_hash": "h0", "iteration": 0}, [chair(0.5)])
    store.write_run({"ckpt": "/work/runs/x/iter1", "ckpt_hash": "h1", "iteration": 1, "parent": "./runs/x/iter0"},
                    [chair(0.4)])
    store.write_run({"ckpt": "/work/runs/y/iter1", "ckpt_hash": "h2", "iteration": 1, "parent": "x/iter"},
                    [chair(0.3)])
    t = tidy_table(store.snapshot().metrics())
    assert t["delta"].iloc[1] == pytest.approx(-0.1) and pd_isna(t["base"].iloc[2])


def test_lmms_data_files_are_shown_relative_to_the_data_root():
    """POPE's files under the run's data root read as paths inside it (a group's leaves too); a file
    outside it shows its folder and name; a hub id stays as it is."""
    from evalsuite.store.table import _source

    meta = {"data_root": "/m/world", "tasks": {"pope": {"config": {"data_source":
            "/m/world/questions/pope_val_random.parquet, /m/world/questions/pope_val_popular.parquet; /x/mme.parquet"}},
            "sqa": {"config": {"data_source": "hub:lmms-lab/ScienceQA"}}}}
    assert _source("pope", meta)["data"] == \
        "questions/pope_val_random.parquet, questions/pope_val_popular.parquet; x/mme.parquet"
    assert _source("sqa", meta)["data"] == "hub:lmms-lab/ScienceQA"


def test_data_files_are_short_whatever_the_root():
    """A data root recorded relative (a run started in another folder) still shortens the files inside it;
    a file outside every root shows its folder and name, never the machine's whole path (issue 38)."""
    from evalsuite.store.table import _source

    files = "; ".join(f"/home/u/proj/runs/demo/world/questions/pope_val_{s}.parquet" for s in ("random", "popular"))
    meta = {"data_root": "runs/demo/world", "tasks": {"pope": {"config": {"data_source": files}}}}
    assert _source("pope", meta)["data"] == "questions/pope_val_random.parquet; questions/pope_val_popular.parquet"
    meta = {"data_root": None, "tasks": {"pope": {"config": {"data_source": files}}}}
    assert _source("pope", meta)["data"] == "questions/pope_val_random.parquet; questions/pope_val_popular.parquet"
    meta = {"data_root": "/elsewhere", "tasks": {"mme": {"config": {"data_source": "/cache/hub/mme/data/test.parquet"}}}}
    assert _source("mme", meta)["data"] == "data/test.parquet"
