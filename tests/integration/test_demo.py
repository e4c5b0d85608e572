"""Issue 9: the demo pipeline at tiny sizes, end to end, twice: same seed -> same metrics."""
import json

import pytest

pytestmark = pytest.mark.slow


def _run(tmp, name):
    import subprocess
    import sys

    from tests.conftest import REPO

    out = tmp / name
    args = [sys.executable, str(REPO / "training" / "train.py"), "--config", str(REPO / "configs" / "demo_tiny.yaml"),
            f"output_dir={out}", f"store={out / 'results'}", f"report_dir={out / 'report'}"]
    res = subprocess.run(args, cwd=tmp, capture_output=True, text=True, timeout=1500)
    assert res.returncode == 0, res.stderr[-4000:]
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
