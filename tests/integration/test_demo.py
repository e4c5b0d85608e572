"""The demo pipeline at tiny sizes, end to end, twice, from two working folders with two empty user
caches (HOME, XDG_CACHE_HOME): same seed -> identical metrics, so nothing shared between runs or
checkouts (a cache, the built-in world, the GT) changes a number."""
import json

import pytest

pytestmark = pytest.mark.slow


def _run(tmp, name):
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
            "output_dir=out", "store=out/results", "report_dir=out/report"]
    res = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=1500)
    assert res.returncode == 0, res.stderr[-4000:]
    # the closing summary: a row per checkpoint, the range check, the report's path
    assert "CHAIR_i" in res.stdout and "check (the preset states no expect: ranges" in res.stdout
    assert "Report: out/report/index.html" in res.stdout
    return out


def _metrics(out):
    import pandas as pd

    from evalsuite.store import Store

    df = Store(out / "results").metrics()
    df = df[["iteration", "task", "metric", "value"]].sort_values(["iteration", "task", "metric"])
    return df.reset_index(drop=True), pd


def test_demo_tiny_end_to_end_and_deterministic(tmp_path):
    a = _run(tmp_path, "a")
    for t in (1, 2):
        assert (a / f"iter_{t}").is_dir()
    html = (a / "report" / "index.html").read_text()
    assert "CHAIR" in html and "csr" in html.lower()
    ma, pd = _metrics(a)
    tasks = set(ma["task"])
    assert {"chair", "relevance", "csr_pairs"} <= tasks and any(t.startswith("evalsuite_") or "pope" in t for t in tasks)
    assert sorted(set(ma["iteration"].dropna().astype(int))) == [0, 1, 2]

    b = _run(tmp_path, "b")
    mb, _ = _metrics(b)
    pd.testing.assert_frame_equal(ma, mb)
    assert json.loads((a / "demo_config.json").read_text())["seed"] == 0
