"""The store distrusts its own files, since a disk fills, a copy is cut short or a file is edited by hand: damaged footers are one line naming
the file; `samples_file` is confined to STORE/samples; a corrupt or missing samples file hides only that
run's samples, and the report names it; results from zero samples are refused; `$...$` labels plot as text.
"""
from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from evalsuite.errors import UserError
from evalsuite.store import Store
from evalsuite.types import MetricValue, TaskResult
from tests.conftest import run_cli
from tests.reliability.helpers import one_error, snapshot

SAMPLE = {"key": "val:1", "image_id": 1, "image": "images/val/1.png", "prompt": "Describe.", "answer": "A dog."}


def caption(value: float = 3.0, samples=(SAMPLE,)) -> TaskResult:
    return TaskResult("caption", "1", [MetricValue("answer_words_mean", value, True, n=len(samples))],
                      samples=list(samples))


def two_runs(tmp_path) -> tuple[Store, list[str]]:
    store = Store(tmp_path / "store")
    ids = [store.write_run({"ckpt": f"/c/{i}", "ckpt_hash": f"h{i}", "iteration": i}, [caption(3.0 + i)])
           for i in range(2)]
    return store, ids


def _rewrite_footer(path, meta_bytes: bytes, drop_column: str | None = None, version: bytes | None = None):
    t = pq.read_table(path)
    if drop_column:
        t = t.drop_columns([drop_column])
    md = {**t.schema.metadata, b"evalsuite.run": meta_bytes}
    if version:
        md[b"evalsuite.schema"] = version
    pq.write_table(t.replace_schema_metadata(md), path)


@pytest.mark.parametrize("case, expect", [
    ("not_object", "footer run metadata is a JSON list, not an object"),
    ("bad_tasks", "footer field 'tasks' has type str"),
    ("v1_no_created_at", "damaged schema v1 store file (KeyError: 'created_at')"),
])
def test_damaged_footer_is_one_line_naming_the_file(case, expect, tmp_path):
    store, ids = two_runs(tmp_path)
    path = store.metrics_dir / f"{ids[1]}.parquet"
    meta = json.loads(pq.read_schema(path).metadata[b"evalsuite.run"])
    if case == "not_object":
        _rewrite_footer(path, b"[1, 2]")
    elif case == "bad_tasks":
        _rewrite_footer(path, json.dumps({**meta, "tasks": "caption"}).encode())
    else:   # a v1 file (schema 1 in the footer) that lacks the created_at column v1 always had
        _rewrite_footer(path, json.dumps(meta).encode(), drop_column="created_at", version=b"1")
    before = snapshot(store.path)
    for cmd in (["table"], ["table", "--list-versions"], ["report", "--out", str(tmp_path / "rep")]):
        res = run_cli(*cmd, "--store", str(store.path))
        line = one_error(res)
        assert line.startswith(f"evalsuite: error: {path}: ") and expect in line, line
    assert snapshot(store.path) == before and not (tmp_path / "rep").exists()


def test_samples_file_outside_the_store_is_never_opened(tmp_path):
    """A footer naming ../../secret.parquet (a real, readable parquet file outside the store): the report
    shows the run's metrics, not the outside file's records, and names the damaged run."""
    store, ids = two_runs(tmp_path)
    outside = tmp_path / "secret.parquet"
    shutil.copy(next(store.samples_dir.glob(f"{ids[1]}-*.parquet")), outside)
    path = store.metrics_dir / f"{ids[1]}.parquet"
    meta = json.loads(pq.read_schema(path).metadata[b"evalsuite.run"])
    _rewrite_footer(path, json.dumps({**meta, "samples_file": "../../secret.parquet"}).encode())
    problems: list[str] = []
    df = store.snapshot().samples(problems=problems)
    assert set(df["run_id"]) == {ids[0]}
    assert problems == [(f"run {ids[1]} ({ids[1]}.parquet): per-sample records not shown: samples_file "
                         f"'../../secret.parquet' points outside {store.samples_dir} (damaged footer)")]
    res = run_cli("report", "--store", str(store.path), "--out", str(tmp_path / "rep"))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    html = (tmp_path / "rep" / "index.html").read_text()
    assert 'class="notes"' in html and "points outside" in html


def test_corrupt_then_moved_samples_file_hides_only_that_run(tmp_path):
    store, ids = two_runs(tmp_path)
    bad = next(store.samples_dir.glob(f"{ids[1]}-*.parquet"))
    bad.write_bytes(b"PAR1 not really parquet")
    for state in ("corrupt", "moved away"):
        res = run_cli("report", "--store", str(store.path), "--out", str(tmp_path / "rep"))
        assert res.returncode == 0 and "Traceback" not in res.stderr, (state, res.stderr[-2000:])
        html = (tmp_path / "rep" / "index.html").read_text()
        assert bad.name in html and ("samples file unreadable" if state == "corrupt" else "samples file missing") in html
        assert "2 runs" in html and "1 per-sample record ·" in html          # the other run is all there
        assert any("WARNING" in ln and bad.name in ln for ln in res.stderr.splitlines())
        bad.rename(tmp_path / bad.name) if state == "corrupt" else None
    assert run_cli("table", "--store", str(store.path)).returncode == 0


@pytest.mark.parametrize("result, msg", [
    (TaskResult("chair", "1", [MetricValue("CHAIRs", 0.0, False, n=0)]), "chair: metric CHAIRs was computed from 0 samples"),
    (TaskResult("caption", "1", [MetricValue("answer_words_mean", 0.0, True)]), "caption: the task produced no samples"),
    (TaskResult("pope", "1", [MetricValue("f1", 0.0, True, n=0)], samples=[SAMPLE]), "pope: metric f1 was computed from 0"),
])
def test_store_refuses_results_from_zero_samples(result, msg, tmp_path):
    store, _ = two_runs(tmp_path)
    before = snapshot(store.path)
    with pytest.raises(UserError, match=msg):
        store.write_run({"ckpt": "/c/9", "iteration": 9}, [caption(), result])
    assert snapshot(store.path) == before          # not even the other result's rows


def test_table_list_versions_on_an_empty_store(tmp_path):
    (tmp_path / "st" / "metrics").mkdir(parents=True)
    res = run_cli("table", "--store", str(tmp_path / "st"), "--list-versions")
    assert res.returncode == 0 and res.stdout == f"no runs in {tmp_path / 'st'}\n" and res.stderr == ""


def test_mathtext_label_is_literal_in_the_report(tmp_path):
    """D6: `cost $\\frac{1$ run` is not valid mathtext; it used to abort the whole report."""
    label = r"cost $\frac{1$ run"
    store = Store(tmp_path / "store")
    for i, lab in enumerate([label, "$x^2$ base"]):
        store.write_run({"ckpt": f"/c/{i}", "ckpt_hash": f"h{i}", "label": lab}, [caption(3.0 + i)])
    res = run_cli("report", "--store", str(store.path), "--out", str(tmp_path / "rep"))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    html = (tmp_path / "rep" / "index.html").read_text()
    assert r"cost $\frac{1$ run" in html            # the tick label, as typed (SVG text, svg.fonttype none)
    assert "$x^2$ base" in html


def test_plots_draw_dollar_strings_literally():
    from evalsuite.report.plots import csr_plots, density_plot, metric_plot

    pts = [{"name": r"a $\frac{1$", "iteration": None, "value": 1.0, "ci_low": None, "ci_high": None},
           {"name": "$b$", "iteration": None, "value": 2.0, "ci_low": None, "ci_high": None}]
    svg = metric_plot(r"task/$\bad{", pts, True)
    assert r"a $\frac{1$" in svg and r"task/$\bad{" in svg
    svg = density_plot(r"$\frac{", {r"x $\frac{1$ chosen": [0.1, 0.2, 0.4], "$y$ rejected": [0.3, 0.5]})
    assert r"x $\frac{1$ chosen (n=3)" in svg and "$y$ rejected (n=2)" in svg
    series = {"chosen_reward_mean": [{**p, "iteration": i} for i, p in enumerate(pts)],
              "reward_gap": [{**p, "iteration": i} for i, p in enumerate(pts)]}
    assert len(csr_plots(series)) == 2
