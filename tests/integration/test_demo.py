"""The demo pipeline at tiny sizes, end to end, from two working folders with two empty user caches
(HOME, XDG_CACHE_HOME): same seed -> identical metrics, so nothing shared between runs or checkouts (a
cache, the built-in world, the GT) changes a number. The second run stops after CSR iteration 1: every
stage that could read something shared (world, data, judge, SFT, one CSR iteration, their evals) runs in
it, and a second CSR iteration would only repeat the first's code on its own outputs."""
import json

import pytest

pytestmark = pytest.mark.slow


def _run(tmp, name, *overrides):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    work = tmp / name
    (work / "home").mkdir(parents=True)
    out = work / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "HF_HOME", "NLTK_DATA")}
    env.update(HOME=str(work / "home"), PYTHONPATH=str(REPO))
    args = [sys.executable, str(REPO / "training" / "train.py"), "--config", str(REPO / "configs" / "demo_tiny.yaml"),
            "output_dir=out", "store=out/results", "report_dir=out/report", *overrides]
    res = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=1500)
    assert res.returncode == 0, res.stderr[-4000:]
    # the closing summary: a row per checkpoint, the range check, the report's path
    assert "CHAIR_i" in res.stdout and "check (the preset states no expect: ranges" in res.stdout
    assert "Report: out/report/index.html" in res.stdout
    return out


def _metrics(out):
    import pandas as pd

    from evalsuite.store import Store

    df = Store(out / "results").snapshot().metrics()
    df = df[["iteration", "task", "metric", "value"]].sort_values(["iteration", "task", "metric"])
    return df.reset_index(drop=True), pd


def test_demo_tiny_end_to_end_and_deterministic(tmp_path):
    from tests.unit.test_report import section

    a = _run(tmp_path, "a")
    for t in (1, 2):
        assert (a / f"iter_{t}").is_dir()
    html = (a / "report" / "index.html").read_text()
    # the report is filled from the demo's store (section ids and nav links are static template text):
    # a CHAIR row per checkpoint, the CSR pairs and DPO curves of both iterations, the POPE/MME questions
    for sec in ("headline", "summary", "iterations", "objects", "csr", "training", "relevance", "samples",
                "questions"):
        assert 'class="empty"' not in section(html, sec), sec
    assert 'data-metric="CHAIRi"' in section(html, "summary")
    ma, pd = _metrics(a)
    tasks = set(ma["task"])
    assert {"chair", "relevance", "csr_pairs"} <= tasks and any(t.startswith("evalsuite_") or "pope" in t for t in tasks)
    assert sorted(set(ma["iteration"].dropna().astype(int))) == [0, 1, 2]

    b = _run(tmp_path, "b", "csr.iterations=1")
    mb, _ = _metrics(b)
    assert sorted(set(mb["iteration"].dropna().astype(int))) == [0, 1]
    # run b's rows are run a's up to iteration 1, less the pairs M_1 generated (they train iteration 2)
    first = ma[ma["iteration"].isin([0, 1]) & ~((ma["iteration"] == 1) & (ma["task"] == "csr_pairs"))]
    first = first.reset_index(drop=True)
    pd.testing.assert_frame_equal(first, mb)
    assert json.loads((a / "demo_config.json").read_text())["seed"] == 0
