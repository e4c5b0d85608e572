"""evalsuite's overhead over raw lmms-eval, and what resume saves after a real kill.

    .venv/bin/python bench/lmms_overhead.py                     # tiny VLM + synthetic world, built here
    .venv/bin/python bench/lmms_overhead.py --ckpt DIR --world W --task mme --repeats 3

1. overhead: the same model (evalsuite's VLM wrapped as an lmms-eval model, no cache) on the same
   task, once through raw `simple_evaluate` and once through `evalsuite.lmms.task.iter_lmms_tasks`
   (data resolution, per-batch cache writes, result conversion). Best of `--repeats` each, alternating.
   Target: ratio <= 1.05.
2. resume: a child process runs the task and is SIGKILLed once about half of the answers are in the
   response cache; the rerun must regenerate only the rest, and a third run nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _kw(ckpt, world, out, batch_size, limit=None) -> dict:
    """iter_lmms_tasks' arguments as `evalsuite run --output OUT` passes them (cache under OUT/.resume)."""
    return dict(ckpt=str(ckpt), data_root=Path(world), limit=limit, batch_size=batch_size, device="cpu",
                cache_root=Path(out) / ".resume" / "lmms")


def _overhead(args, backend, scratch: Path) -> dict:
    from evalsuite.lmms import backend as adapter
    from evalsuite.lmms.task import iter_lmms_tasks, resolve_specs

    (spec,) = resolve_specs([args.task], data_root=args.world, limit=args.limit)
    evaluator = adapter.import_evaluator()
    tm = adapter.task_manager()
    raw_times, ours_times = [], []
    for rep in range(args.repeats):
        lm = adapter.make_model(backend, batch_size=args.batch_size, cache_root=None)
        t0 = time.perf_counter()
        evaluator.simple_evaluate(model=lm, tasks=list(spec.tasks), limit=args.limit, batch_size=args.batch_size,
                                  log_samples=True, bootstrap_iters=100, task_manager=tm, verbosity="WARNING")
        raw_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()  # a fresh output dir: a cold cache, every answer generated and written
        list(iter_lmms_tasks([args.task], backend=backend,
                       **_kw(args.ckpt, args.world, scratch / f"ours{rep}", args.batch_size, args.limit)))
        ours_times.append(time.perf_counter() - t0)
    return {"raw_s": min(raw_times), "evalsuite_s": min(ours_times), "ratio": min(ours_times) / min(raw_times)}


def _cache_lines(out: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (out / ".resume").rglob("*.jsonl"))


def _resume(args, backend, scratch: Path) -> dict:
    from evalsuite.lmms.task import iter_lmms_tasks

    out = scratch / "resume"
    child = subprocess.Popen([sys.executable, __file__, "--child", "--ckpt", str(args.ckpt), "--world",
                              str(args.world), "--task", args.task, "--out", str(out),
                              "--batch-size", str(args.batch_size)] + (["--limit", str(args.limit)] if args.limit else []),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    total = None
    while child.poll() is None:
        done = _cache_lines(out)
        if total is None and (out / "total.json").exists():
            total = json.loads((out / "total.json").read_text())["docs"]
        if total and done >= total // 2:
            child.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    child.wait()
    kept = _cache_lines(out)
    t0 = time.perf_counter()
    (second,) = list(iter_lmms_tasks([args.task], backend=backend,
                               **_kw(args.ckpt, args.world, out, args.batch_size, args.limit)))
    second_s = time.perf_counter() - t0
    (third,) = list(iter_lmms_tasks([args.task], backend=backend,
                              **_kw(args.ckpt, args.world, out, args.batch_size, args.limit)))
    return {"killed": child.returncode == -signal.SIGKILL, "kept_after_kill": kept,
            "docs": len(second.samples), "rerun_generated": second.extra["responses"]["generated"],
            "rerun_s": second_s, "third_run_generated": third.extra["responses"]["generated"]}


def _child(args) -> None:
    import pyarrow.parquet as pq  # tell the parent how many docs to expect

    from evalsuite.lmms.task import iter_lmms_tasks, resolve_specs

    (spec,) = resolve_specs([args.task], data_root=args.world, limit=args.limit)
    files = [f for leaf in spec.leaves for f in leaf.source.split(", ")]
    docs = sum(pq.read_metadata(f).num_rows for f in files)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "total.json").write_text(json.dumps({"docs": min(docs, args.limit or docs)}))
    list(iter_lmms_tasks([spec], **_kw(args.ckpt, args.world, args.out, args.batch_size, args.limit)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ckpt", type=Path)
    p.add_argument("--world", type=Path)
    p.add_argument("--task", default="mme")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--limit", type=int)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="lmms-bench-"))
    os.environ.setdefault("HF_HOME", str(scratch / "hf"))
    if args.child:
        _child(args)
        return 0
    if args.ckpt is None:
        from evalsuite.kit.tiny import build_tiny_vlm

        args.ckpt = build_tiny_vlm(scratch / "tiny-vlm", seed=0)
    if args.world is None:
        from evalsuite.world.build import build_world

        args.world = build_world(scratch / "world", images=60, seed=0)
    from evalsuite.models.backend import VLMBackend

    backend = VLMBackend.from_checkpoint(args.ckpt, device="cpu")
    over = _overhead(args, backend, scratch)
    print(f"overhead  task={args.task} raw simple_evaluate {over['raw_s']:.2f} s, evalsuite {over['evalsuite_s']:.2f} s,"
          f" ratio {over['ratio']:.3f} (target <= 1.05)")
    res = _resume(args, backend, scratch)
    print(f"resume    killed={res['killed']} with {res['kept_after_kill']}/{res['docs']} answers on disk; rerun "
          f"regenerated {res['rerun_generated']} ({res['rerun_s']:.2f} s), third run regenerated "
          f"{res['third_run_generated']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
