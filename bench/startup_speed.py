"""Benchmark: the fast paths a user waits on, with their targets on an idle 2-core machine.

    python bench/startup_speed.py            # exits 1 when a target is missed

- building the CLI's parser (what `evalsuite --help` does after start-up): < 1 s (~0.5 s);
- `python -m evalsuite.cli --help`, interpreter start-up included: < 5 s;
- `evalsuite run --tasks chiar ...` (a misspelled task name, refused before lmms-eval and torch are imported),
  interpreter start-up included: < 2 s (~0.5 s; it took 33 s when lmms-eval's index was built first);
- `build_world(images=600)` (the built-in world, built on first use): < 30 s (~3 s).

These were wall-clock assertions in tests/integration/test_cli_foundation.py and tests/unit/test_world_build.py,
where a loaded CI machine could miss them by chance; the tests keep what makes these paths fast (no heavy
import to build the parser) and what they produce, and the times are measured here.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"parser": 1.0, "help": 5.0, "typo": 2.0, "world600": 30.0}


def main() -> int:
    code = "import time; t=time.perf_counter(); from evalsuite.cli import build_parser; build_parser(); " \
           "print(time.perf_counter()-t)"
    took = {"parser": float(subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True,
                                           text=True).stdout)}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evalsuite.cli", "--help"], cwd=REPO, check=True, capture_output=True)
    took["help"] = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "evalsuite.cli", "run", "--ckpt", d, "--tasks", "chair,chiar",
                              "--data-root", d], cwd=REPO, capture_output=True, text=True)
        took["typo"] = time.perf_counter() - t
        if res.returncode != 2 or "chiar: unknown task" not in res.stderr:
            print(f"typo: expected the unknown-task error, got rc {res.returncode}: {res.stderr.strip()}")
            return 1
    from evalsuite.world.build import build_world

    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        build_world(Path(d) / "w", images=600, seed=1)
        took["world600"] = time.perf_counter() - t
    missed = [k for k, v in took.items() if v >= TARGETS[k]]
    for k, v in took.items():
        print(f"{k:9s} {v:6.2f} s (target < {TARGETS[k]:g} s){'  MISSED' if k in missed else ''}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
