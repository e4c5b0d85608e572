"""Results store: rows and samples round-trip, atomic publish, corrupt files, schema upgrades, versions."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from evalsuite.errors import UserError
from evalsuite.store import SCHEMA_VERSION, Store, config_hash
from evalsuite.store.schema import COLUMN_NAMES
from evalsuite.types import MetricValue, TaskResult

CHAIR_SAMPLE = {
    "key": "val:42", "image_id": 42, "image": "images/val/000042.png", "prompt": "Describe the image.",
    "answer": "A dog and a cat on a sofa.",
    "mentioned": [{"word": "dog", "category": "dog", "position": 2, "hallucinated": False},
                  {"word": "cat", "category": "cat", "position": 12, "hallucinated": True}],
    "hallucinated": ["cat"], "gt": ["dog", "couch"], "chair_s": 1,
}


def chair_result(chair_s: float = 0.25) -> TaskResult:
    return TaskResult("chair", "2", [
        MetricValue("CHAIRs", chair_s, False, n=4, ci_low=chair_s - 0.1, ci_high=chair_s + 0.1),
        MetricValue("CHAIRi", 0.1, False, n=9, stderr=0.02),
    ], samples=[CHAIR_SAMPLE], config={"variant": "original"})


def pope_result() -> TaskResult:
    return TaskResult("pope", "0.0", [MetricValue("f1", 0.81, True, n=300, variant="random")])


def meta(it: int | None = 0, **kw) -> dict:
    return {"created_at": "2026-01-01T00:00:00+00:00", "ckpt": f"/ckpts/iter{it}", "ckpt_hash": f"h{it}",
            "iteration": it, "method": "csr", "parent": None, "config": {"tasks": ["chair"], "limit": 4},
            "code_version": "0.1.0+abc", "lmms_eval_version": "0.7.3", **kw}


def test_rows_and_samples_round_trip(tmp_path):
    store = Store(tmp_path / "results")
    rid = store.write_run(meta(1, label="first"), [chair_result(), pope_result()])
    df = store.snapshot().metrics()
    assert list(df.columns) == COLUMN_NAMES
    assert len(df) == 3
    row = df[df["metric"] == "CHAIRs"].iloc[0]
    assert (row["run_id"], row["ckpt"], row["ckpt_hash"], row["iteration"]) == (rid, "/ckpts/iter1", "h1", 1)
    assert (row["task"], row["task_version"], row["value"], row["n"]) == ("chair", "2", 0.25, 4)
    assert row["ci_low"] == pytest.approx(0.15) and row["ci_high"] == pytest.approx(0.35)
    assert not row["higher_is_better"] and row["label"] == "first" and row["method"] == "csr"
    assert row["evalsuite_version"] == "0.1.0+abc" and row["lmms_eval_version"] == "0.7.3"
    assert row["schema_version"] == SCHEMA_VERSION
    assert row["config_hash"] == config_hash({"limit": 4, "tasks": ["chair"]})    # key order irrelevant
    assert df[df["metric"] == "CHAIRi"].iloc[0]["stderr"] == 0.02
    assert df[df["metric"] == "f1"].iloc[0]["variant"] == "random"
    # the documented one-call read sees the same rows
    direct = pd.read_parquet(tmp_path / "results" / "metrics")
    assert len(direct) == 3 and set(direct["metric"]) == {"CHAIRs", "CHAIRi", "f1"}
    samples = store.snapshot().samples(task="chair")
    assert len(samples) == 1
    s = samples.iloc[0]
    assert s["run_id"] == rid and s["answer"] == CHAIR_SAMPLE["answer"]
    assert s["mentioned"] == CHAIR_SAMPLE["mentioned"] and s["gt"] == ["dog", "couch"]
    assert len(pd.read_parquet(tmp_path / "results" / "samples")) == 1
    m = store.snapshot().run_meta(rid)
    assert m["config"] == {"tasks": ["chair"], "limit": 4} and m["tasks"]["chair"]["config"] == {"variant": "original"}
    assert json.loads((tmp_path / "results" / "store.json").read_text())["schema"] == SCHEMA_VERSION


def test_generated_run_ids_are_unique_and_duplicates_refused(tmp_path):
    store = Store(tmp_path)
    a, b = store.write_run(meta(0), [pope_result()]), store.write_run(meta(0), [pope_result()])
    assert a != b
    store.write_run(meta(0, run_id="fixed-1"), [pope_result()])
    with pytest.raises(UserError, match="fixed-1.parquet: run id already in the store"):
        store.write_run(meta(0, run_id="fixed-1"), [pope_result()])
    assert len(store.snapshot().metrics()) == 3


@pytest.mark.parametrize("bad,match", [({"iteration": "1"}, "meta.iteration"),
                                       ({"iteration": True}, "meta.iteration"),
                                       ({"run_id": "../evil"}, "run_id")])
def test_bad_meta_is_a_user_error(tmp_path, bad, match):
    with pytest.raises(UserError, match=match):
        Store(tmp_path).write_run(meta(0, **bad), [pope_result()])


def test_corrupt_file_named_and_other_runs_untouched(tmp_path):
    store = Store(tmp_path)
    ids = [store.write_run(meta(i), [chair_result()]) for i in range(2)]
    before = {p.name: p.read_bytes() for p in store.metrics_dir.iterdir()}
    bad = store.metrics_dir / "20990101T000000-deadbeef.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(UserError, match="20990101T000000-deadbeef.parquet: not a readable store file"):
        store.snapshot().metrics()
    store.write_run(meta(2), [chair_result()])      # writing still works beside a damaged file
    assert all((store.metrics_dir / n).read_bytes() == b for n, b in before.items())
    bad.rename(tmp_path / "quarantined.parquet")
    assert set(ids) <= set(store.snapshot().metrics()["run_id"]) and len(store.snapshot().runs()) == 3


def test_killed_writer_leaves_no_row(tmp_path, monkeypatch):
    """A failure between writing the temp file and publishing it leaves neither a row nor a temp file;
    the samples file written before is unreferenced and ignored."""
    store = Store(tmp_path)
    store.write_run(meta(0), [chair_result()])

    def boom(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "link", boom)
    with pytest.raises(KeyboardInterrupt):
        store.write_run(meta(1), [chair_result()])
    monkeypatch.undo()
    assert [p.name for p in store.metrics_dir.iterdir() if p.name.startswith(".")] == []
    assert len(store.snapshot().metrics()) == 2 and len(store.snapshot().samples()) == 1
    # a leftover temp file of a writer killed with SIGKILL is skipped by both readers
    (store.metrics_dir / ".x.parquet.1234.tmp").write_bytes(b"half")
    assert len(store.snapshot().metrics()) == 2 and len(pd.read_parquet(store.metrics_dir)) == 2


def _write_v1_file(path):
    """The v1 layout by hand: `checkpoint` column, no label/parent/stderr/lmms_eval_version/written_at."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"schema_version": 1, "run_id": "old-1", "created_at": "2025-06-01T00:00:00+00:00",
             "checkpoint": "/ckpts/base", "ckpt_hash": "h0", "iteration": 0, "method": "base", "task": "chair",
             "task_version": "1", "metric": "CHAIRs", "variant": None, "value": 0.5, "ci_low": 0.4,
             "ci_high": 0.6, "n": 10, "higher_is_better": False, "config_hash": "c0",
             "evalsuite_version": "0.0.9"}]
    table = pa.Table.from_pylist(rows).replace_schema_metadata(
        {b"evalsuite.schema": b"1", b"evalsuite.run": json.dumps({"run_id": "old-1", "config": {"a": 1}}).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def test_v1_store_still_reads_next_to_current_files(tmp_path):
    store = Store(tmp_path)
    _write_v1_file(store.metrics_dir / "old-1.parquet")
    store.write_run(meta(1), [chair_result(0.2)])
    df = store.snapshot().metrics()
    old = df[df["run_id"] == "old-1"].iloc[0]
    assert old["ckpt"] == "/ckpts/base" and old["schema_version"] == SCHEMA_VERSION and old["value"] == 0.5
    assert pd.isna(old["stderr"]) and pd.isna(old["label"]) and old["written_at"] == old["created_at"]
    assert list(store.snapshot().runs()["run_id"])[0] == "old-1"        # written 2025, so version 1
    assert store.snapshot().run_meta("old-1")["config"] == {"a": 1}


def test_newer_schema_is_refused_with_a_clear_message(tmp_path):
    store = Store(tmp_path)
    store.write_run(meta(0, run_id="future"), [pope_result()])
    import pyarrow.parquet as pq

    path = store.metrics_dir / "future.parquet"
    t = pq.read_table(path)
    pq.write_table(t.replace_schema_metadata({**t.schema.metadata, b"evalsuite.schema": b"99"}), path)
    with pytest.raises(UserError, match="future.parquet: written with store schema v99.*upgrade evalsuite"):
        store.snapshot().metrics()


def test_versions_select_older_states(tmp_path):
    store = Store(tmp_path)
    ids = [store.write_run(meta(i % 2), [chair_result(0.3 - 0.1 * i)]) for i in range(3)]
    runs = store.snapshot().runs()
    assert list(runs["version"]) == [1, 2, 3] and list(runs["run_id"]) == ids
    assert store.snapshot().select_runs(as_of=2) == ids[:2]
    assert store.snapshot().select_runs(as_of="-1") == ids[:2]
    assert store.snapshot().select_runs(as_of=ids[0]) == ids[:1]
    assert store.snapshot().select_runs(runs=[ids[2]]) == [ids[2]]
    assert set(store.snapshot().metrics(as_of=1)["run_id"]) == {ids[0]}
    with pytest.raises(UserError, match="versions 1..3"):
        store.snapshot().select_runs(as_of=7)
    with pytest.raises(UserError, match="nope"):
        store.snapshot().metrics(runs=["nope"])


def test_empty_store_reads_as_empty_frames(tmp_path):
    store = Store(tmp_path / "none")
    assert store.snapshot().metrics().empty and store.snapshot().samples().empty and store.snapshot().runs().empty


def test_eval_key_setup_and_generator_are_stored(tmp_path):
    """A result's eval_key and identity land on every row of it; `generator` comes from the run meta."""
    store = Store(tmp_path)
    res = TaskResult("chair", "1", [MetricValue("CHAIRs", 0.2, False, n=4), MetricValue("CHAIRi", 0.1, False)],
                     identity={"prompt": "A", "n_images": 4, "gen": {"max_new_tokens": 8}})
    rid = store.write_run(meta(1, generator="h0"), [res, pope_result()])
    df = store.snapshot().metrics()
    chair = df[df["task"] == "chair"]
    assert set(chair["eval_key"]) == {res.eval_key} and len(res.eval_key) == 16
    assert json.loads(chair.iloc[0]["eval_setup"]) == {"gen": {"max_new_tokens": 8}, "n_images": 4, "prompt": "A"}
    assert df[df["task"] == "pope"].iloc[0]["eval_key"] == pope_result().eval_key != res.eval_key
    assert set(df["generator"]) == {"h0"}
    assert store.snapshot().run_meta(rid)["tasks"]["chair"]["identity"]["prompt"] == "A"


def _write_v2_file(path, run_id, ckpt, task_config, task="chair", iteration=0, data_root="/data/w"):
    """The v2 layout by hand: no eval_key / eval_setup / generator; task configs only in the footer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {"schema_version": 2, "run_id": run_id, "written_at": f"2025-07-01T00:00:0{iteration}+00:00",
           "created_at": "2025-07-01T00:00:00+00:00", "label": f"demo/iter_{iteration}", "ckpt": ckpt,
           "ckpt_hash": f"h-{ckpt}", "iteration": iteration, "method": "csr", "parent": None, "task": task,
           "task_version": "1", "metric": "CHAIRs", "variant": None, "value": 0.5, "ci_low": None, "ci_high": None,
           "n": 8, "stderr": None, "higher_is_better": False, "config_hash": f"c-{ckpt}",
           "evalsuite_version": "0.1.0", "lmms_eval_version": None}
    footer = {"run_id": run_id, "data_root": data_root, "config": {"ckpt": ckpt},
              "tasks": {task: {"version": "1", "config": task_config}}}
    table = pa.Table.from_pylist([row]).replace_schema_metadata(
        {b"evalsuite.schema": b"2", b"evalsuite.run": json.dumps(footer).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def test_v2_store_reads_with_eval_keys_from_the_footer(tmp_path):
    """Two v2 runs of different checkpoints with one task config share an eval_key (their run
    config_hash differs: it holds the checkpoint path); another prompt gives another key."""
    from evalsuite.store.schema import v2_identity
    from evalsuite.types import eval_key

    store = Store(tmp_path)
    cfg_a = {"split": "val", "prompt": "A", "n_images": 8, "limit": None}
    _write_v2_file(store.metrics_dir / "v2-a.parquet", "v2-a", "/ck/0", cfg_a)
    _write_v2_file(store.metrics_dir / "v2-b.parquet", "v2-b", "/ck/1", cfg_a, iteration=1)
    _write_v2_file(store.metrics_dir / "v2-c.parquet", "v2-c", "/ck/1", {**cfg_a, "prompt": "B"}, iteration=2)
    store.write_run(meta(3), [chair_result()])
    df = store.snapshot().metrics().set_index("run_id")
    assert list(df.columns) == [c for c in COLUMN_NAMES if c != "run_id"]
    assert df.loc["v2-a", "eval_key"] == df.loc["v2-b", "eval_key"] != df.loc["v2-c", "eval_key"]
    assert df.loc["v2-a", "eval_key"] == eval_key("chair", "1", v2_identity("chair", cfg_a, "/data/w"))
    assert json.loads(df.loc["v2-c", "eval_setup"])["v2_task_config"]["prompt"] == "B"
    assert pd.isna(df.loc["v2-a", "generator"]) and (df["schema_version"] == SCHEMA_VERSION).all()


def test_v2_csr_pair_rows_move_to_the_generator(tmp_path):
    """v2 wrote iteration t's pair statistics with ckpt = M_{t-1} but iteration t and label iter_t:
    read as v3 they describe M_{t-1} (iteration t - 1, no label of their own, generator = its hash),
    and the bookkeeping keys (iteration, generator) are not part of the setup."""
    store = Store(tmp_path)
    for t in (1, 2):
        _write_v2_file(store.metrics_dir / f"p{t}.parquet", f"p{t}", f"/run/iter_{t - 1}",
                       {"iteration": t, "generator": f"/run/iter_{t - 1}", "lam": 1.0}, task="csr_pairs", iteration=t)
    df = store.snapshot().metrics().set_index("run_id")
    assert list(df["iteration"]) == [0, 1] and df["label"].isna().all() and df["method"].isna().all()
    assert list(df["generator"]) == ["h-/run/iter_0", "h-/run/iter_1"]
    assert df.loc["p1", "eval_key"] == df.loc["p2", "eval_key"]


def test_snapshot_reads_each_file_once(tmp_path, monkeypatch):
    store = Store(tmp_path)
    for i in range(3):
        store.write_run(meta(i), [chair_result()])
    calls = []
    from evalsuite.store import store as store_module

    real = store_module.read_file
    monkeypatch.setattr(store_module, "read_file", lambda p: calls.append(p) or real(p))
    snap = store.snapshot()
    ids = snap.select_runs(as_of=2)
    assert len(snap.metrics(as_of=2)) == 4 and len(snap.runs()) == 3 and len(snap.run_meta()) == 3
    assert len(snap.samples(run_id=ids)) == 2
    assert len(calls) == 3


def test_has_result_reads_each_footer_once_and_sees_new_files(tmp_path, monkeypatch):
    """Issue 34: repeated has_result calls read each metrics file's footer once per process; a file written
    after the first call is read when it appears."""
    import pyarrow.parquet as pq

    store = Store(tmp_path)
    store.write_run({**meta(0), "run_id": "a", "ckpt_hash": "h0"}, [chair_result()])
    store.write_run({**meta(1), "run_id": "b", "ckpt_hash": "h1"}, [chair_result()])
    key = store.snapshot().run_meta("a")["tasks"]["chair"]["eval_key"]
    reads = []
    real = pq.read_schema
    monkeypatch.setattr(pq, "read_schema", lambda p, *a, **kw: reads.append(Path(p).name) or real(p, *a, **kw))
    for _ in range(3):
        assert store.has_result("h0", key) == "a" and store.has_result("h9", key) is None
    assert sorted(reads) == ["a.parquet", "b.parquet"]
    store.write_run({**meta(2), "run_id": "c", "ckpt_hash": "h9"}, [chair_result()])
    assert store.has_result("h9", key) == "c" and sorted(reads) == ["a.parquet", "b.parquet", "c.parquet"]


def test_one_run_id_rule():
    """Issue 34: eval runs and the store name runs by one function, in the format stored runs use."""
    import datetime as dt

    from evalsuite import store as store_pkg
    from evalsuite.store.store import new_run_id

    rid = new_run_id(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc))
    assert re.fullmatch(r"20260102-030405-[0-9a-f]{6}", rid)
    assert store_pkg.new_run_id is new_run_id
    import evalsuite.run as run_mod
    assert not hasattr(run_mod, "new_run_id")      # run.py imports the store's, it keeps no copy


def test_readers_live_on_the_snapshot_only(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(AttributeError, match=r"Store.metrics: read through Store.snapshot\(\).metrics\(\)"):
        store.metrics()
