"""Two processes appending to one store at the same time lose no rows."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from evalsuite.store import Store

WRITER = textwrap.dedent("""
    import sys
    from evalsuite.store import Store
    from evalsuite.types import MetricValue, TaskResult

    store, tag = Store(sys.argv[1]), sys.argv[2]
    for i in range(50):     # 50 runs x 4 metrics = 200 rows, each run with 2 per-sample records
        metrics = [MetricValue(f"m{j}", float(i * 10 + j), True, n=2) for j in range(4)]
        samples = [{"key": f"{tag}-{i}-{k}", "answer": "a dog", "prompt": "p"} for k in range(2)]
        store.write_run({"ckpt": f"/ck/{tag}", "iteration": i, "config": {"tag": tag}},
                        [TaskResult("chair", "1", metrics, samples=samples)])
""")


def test_two_writers_lose_nothing(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "store"), tag],
                              env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
             for tag in ("a", "b")]
    assert [p.wait(timeout=240) for p in procs] == [0, 0]
    store = Store(tmp_path / "store")
    df = store.snapshot().metrics()
    assert len(df) == 400 and df["run_id"].nunique() == 100
    got = set(zip(df["ckpt"], df["iteration"].astype(int), df["metric"], df["value"]))
    want = {(f"/ck/{t}", i, f"m{j}", float(i * 10 + j)) for t in "ab" for i in range(50) for j in range(4)}
    assert got == want
    assert len(store.snapshot().samples()) == 200
    assert list(store.snapshot().runs()["version"]) == list(range(1, 101))
