"""Benchmark: `evalsuite report` and `evalsuite table` on a store of 2,000 small runs.

    python bench/report_scale.py --keep /tmp/scale              # build the store once (kept), measure
    python bench/report_scale.py --keep /tmp/scale --before /work/main   # and the same commands on another tree

The store is written through `Store.write_run` as `evalsuite run` writes it: one store run per checkpoint and
task (chair, relevance, POPE, MME), records in the tasks' own shapes with the per-sample values their metric
specs store (tests/report_data.py), small synthetic images. Default shape: 50 lineages x 10 checkpoints
(iteration 0 the base, each later one's manifest parent the one before) x 4 tasks = 2,000 runs, 40 images and
24 POPE questions per checkpoint.

Each command runs in a child process (`python -m evalsuite.cli ...` with PYTHONPATH = the tree measured), so
wall time includes start-up, and peak RSS is that child's `ru_maxrss` (resource.getrusage(RUSAGE_CHILDREN) in
a wrapper process whose only child it is). Targets (issue 37): report < 30 s, < 1 GB, < 15 MB of HTML; table < 20 s, < 500 MB.
Exits 1 when the tree measured (this one) misses a target. CPU time (user + sys of the child) is printed
too: on a shared machine it is steadier than wall time.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"report": (30.0, 1024.0, 15.0), "table": (20.0, 500.0, None)}    # seconds, MB RSS, MB HTML


def fill_store(root: Path, lineages: int, per_lineage: int, n_images: int, seed: int = 0) -> int:
    """Write the store; returns the number of runs."""
    import random

    sys.path.insert(0, str(REPO))
    from tests.report_data import MME_SCORES, chair_result, image, mme_result, pope_result, relevance_result

    from evalsuite.store import Store

    store = Store(root / "store")
    imgs = [image(root / "world" / "images" / f"val_{i:03d}.png", (20 * i % 255, 140, 220 - 5 * i % 200))
            for i in range(n_images)]
    rng = random.Random(seed)
    runs = 0
    for lin in range(lineages):
        for it in range(per_lineage):
            rate = max(0.05, 0.5 - 0.04 * it)
            chair = chair_result(imgs, {i for i in range(n_images) if rng.random() < rate})
            pope = pope_result(["yes" if i % 2 == 0 or rng.random() < rate else "no" for i in range(24)])
            ckpt = f"/ckpts/l{lin:03d}/iter_{it}"
            meta = {"ckpt": ckpt, "ckpt_hash": f"{lin:032x}{it:032x}", "iteration": it,
                    "parent": f"/ckpts/l{lin:03d}/iter_{it - 1}" if it else None, "method": "csr" if it else "sft",
                    "label": f"l{lin:03d}/iter_{it}", "data_root": str(root / "world"),
                    "config": {"tasks": ["chair", "relevance", "pope", "mme"], "lineage": lin, "iteration": it}}
            for task, result in (("chair", chair), ("relevance", relevance_result(chair, 0.5 + 0.01 * it)),
                                 ("pope", pope), ("mme", mme_result(MME_SCORES[min(it, 2)]))):
                store.write_run({**meta, "run_id": f"run-l{lin:03d}-i{it:02d}-{task}"}, [result])
                runs += 1
    return runs


_WRAP = """import json, resource, subprocess, sys, time
t = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
secs = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": proc.returncode, "seconds": secs, "stdout": proc.stdout, "stderr": proc.stderr[-2000:],
                  "rss_kb": ru.ru_maxrss, "cpu": ru.ru_utime + ru.ru_stime}))
"""


def measure(tree: Path, argv: list[str]) -> dict:
    """Wall seconds and peak RSS (MB) of `python -m evalsuite.cli ARGV` with PYTHONPATH=tree. A wrapper
    process runs it as its only child, so the wrapper's RUSAGE_CHILDREN peak is this command's alone."""
    import json

    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", _WRAP, sys.executable, "-m", "evalsuite.cli", *argv], cwd=tree,
                          env=env, capture_output=True, text=True, check=True)
    r = json.loads(proc.stdout)
    if r["rc"]:
        raise SystemExit(f"{tree}: evalsuite {' '.join(argv)} exited {r['rc']}:\n{r['stderr']}")
    return {"seconds": r["seconds"], "cpu_s": r["cpu"], "rss_mb": r["rss_kb"] / 1024, "stdout": r["stdout"]}


def run_all(tree: Path, root: Path, tag: str) -> dict:
    out = root / f"report-{tag}"
    out.mkdir(parents=True, exist_ok=True)
    rep = measure(tree, ["report", "--store", str(root / "store"), "--out", str(out)])
    rep["html_mb"] = (out / "index.html").stat().st_size / 2**20
    tab = measure(tree, ["table", "--store", str(root / "store")])
    tab["html_mb"] = None
    tab["lines"] = len(tab.pop("stdout").splitlines())
    rep.pop("stdout")
    return {"report": rep, "table": tab}


def _cell(v, unit: str) -> str:
    return "-" if v is None else f"{v:.1f} {unit}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lineages", type=int, default=50)
    ap.add_argument("--per-lineage", type=int, default=10)
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--keep", help="build the store in this folder (kept; reused when it holds one)")
    ap.add_argument("--before", help="also measure this tree (e.g. a checkout of main), in a separate child")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        if not (root / "store" / "metrics").is_dir():
            t = time.perf_counter()
            n = fill_store(root, args.lineages, args.per_lineage, args.images)
            print(f"wrote {n} runs in {time.perf_counter() - t:.0f} s to {root / 'store'}", flush=True)
        n_runs = len(list((root / "store" / "metrics").glob("*.parquet")))
        results = {}
        if args.before:
            results["before"] = run_all(Path(args.before).resolve(), root, "before")
        results["after"] = run_all(REPO, root, "after")
    print(f"store: {n_runs} runs ({args.lineages} lineages x {args.per_lineage} checkpoints x 4 tasks)")
    cols = list(results)
    print("| command | measure | " + " | ".join(cols) + " | target |")
    print("|---|---|" + "---|" * len(cols) + "---|")
    missed = []
    for cmd, (t_s, t_mb, t_html) in TARGETS.items():
        for key, unit, target in (("seconds", "s", t_s), ("cpu_s", "s", None), ("rss_mb", "MB", t_mb),
                                  ("html_mb", "MB", t_html)):
            if target is None and key != "cpu_s":
                continue
            vals = [results[c][cmd][key] for c in cols]
            name = {"seconds": "wall", "cpu_s": "CPU (user+sys)", "rss_mb": "peak RSS", "html_mb": "HTML"}[key]
            print(f"| evalsuite {cmd} | {name} | " + " | ".join(_cell(v, unit) for v in vals)
                  + (f" | < {target:g} {unit} |" if target else " | |"))
            v = results["after"][cmd][key]
            if target is not None and v is not None and v >= target:
                missed.append(f"{cmd} {key} {v:.1f} >= {target}")
    print("OK" if not missed else "MISSED: " + "; ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
