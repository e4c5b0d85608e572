"""Is the demo's result robust? Run the demo preset for every seed x thread count and tabulate.

    python bench/demo_matrix.py --seeds 0 1 2 --threads 1 2 --out /tmp/demo_matrix

Each run is `python training/train.py --config PRESET seed=S` in its own output folder with
OMP_NUM_THREADS=T (torch's intra-op thread count, which changes float rounding in the CPU kernels).
A run whose store already has its last iteration is not run again. Prints one markdown row per run:
the base's POPE accuracy and the base/last CHAIR_i with 95% CIs, and the two conditions the demo
must meet on every run (issue: the demo's result is not a knife edge): POPE of the base at least
--pope-min, and the last iteration's CHAIR_i CI wholly below the base's.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_one(preset: str, seed: int, threads: int, out: Path, overrides: list[str]) -> float:
    """Run the demo once (unless its summary is already there); the wall time in seconds (0 when skipped)."""
    if (out / "done").exists():
        return 0.0
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, str(ROOT / "training" / "train.py"), "--config", preset, f"seed={seed}",
           f"output_dir={out}", f"report_dir={out / 'report'}", f"store={out / 'results'}", *overrides]
    start = time.time()
    with open(out.parent / f"{out.name}.log", "w") as logf:
        subprocess.run(cmd, env=env, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT, check=True)
    (out / "done").write_text("")
    return time.time() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="configs/demo.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--out", type=Path, required=True, help="one folder per run below it")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a preset override for every run (repeatable), e.g. sft.max_steps=6000")
    p.add_argument("--tag", default="", help="suffix of the run folders (runs with other --set values)")
    p.add_argument("--pope-min", type=float, default=0.65, help="base POPE accuracy counted as well above chance")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from training.demo.summary import summary_rows

    print("| seed | threads | minutes | base POPE | last POPE | base CHAIR_i [CI] | last CHAIR_i [CI] | POPE ok | CHAIR_i ok |")
    print("|---|---|---|---|---|---|---|---|---|")
    all_ok = True
    for seed in args.seeds:
        for threads in args.threads:
            out = args.out / f"seed{seed}_threads{threads}{args.tag}"
            out.mkdir(parents=True, exist_ok=True)
            wall = run_one(args.preset, seed, threads, out, args.set)
            rows = summary_rows(out / "results")
            base, last = rows[0], rows[-1]
            pope_ok = base.get("POPE acc", (0,))[0] >= args.pope_min
            bc, lc = base["CHAIR_i"], last["CHAIR_i"]
            chair_ok = len(rows) > 1 and lc[2] < bc[1]
            all_ok &= pope_ok and chair_ok
            print(f"| {seed} | {threads} | {wall / 60:.1f} | {base.get('POPE acc', ('-',))[0]:.3f} | "
                  f"{last.get('POPE acc', ('-',))[0]:.3f} | {bc[0]:.3f} [{bc[1]:.3f}, {bc[2]:.3f}] | "
                  f"{lc[0]:.3f} [{lc[1]:.3f}, {lc[2]:.3f}] | {'yes' if pope_ok else 'NO'} | "
                  f"{'yes' if chair_ok else 'NO'} |", flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
