"""Seconds per DPO step on the tiny LLaVA, with and without precomputed reference log-probs.

    OMP_NUM_THREADS=1 python bench/dpo_step.py [--steps 20] [--batch 8] [--work /tmp/dpo_bench]

Builds the tiny checkpoint and a small synthetic world (offline), then runs the same LoRA DPO job
twice. Per-step time is the trainer's own `train_runtime / steps`; the one-off reference pass is
timed separately (it is paid once per dataset, and reused over every epoch).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _pairs(world: Path, out: Path, n: int) -> Path:
    caps = json.loads((world / "annotations" / "captions_train.json").read_text())
    files = {im["id"]: f"images/train/{im['file_name']}" for im in caps["images"]}
    first: dict[int, str] = {}
    for a in caps["annotations"]:
        first.setdefault(a["image_id"], a["caption"])
    items = sorted(first.items())[:n]
    pairs = [{"image": files[i], "prompt": "describe the image.", "chosen": c, "rejected": items[(k + 1) % len(items)][1]}
             for k, (i, c) in enumerate(items)]
    path = out / "pairs.json"
    path.write_text(json.dumps(pairs))
    return path


def _run(args, tiny: Path, world: Path, pairs: Path, out: Path, precompute: bool) -> dict:
    from training.config import load_config
    from training.data import load_examples
    from training.trainers.dpo import build_dpo_trainer
    from training.trainers.model import load_model_and_processor

    cfg = load_config(["--config", "configs/train/tiny_cpu.yaml", "--model_name_or_path", str(tiny),
                       "--data_path", str(pairs), "--image_root", str(world), "--output_dir", str(out),
                       "--max_steps", str(args.steps), "--per_device_train_batch_size", str(args.batch),
                       "--logging_steps", str(args.steps), "--disable_tqdm", "true"])
    train_ds, _, _ = load_examples(cfg)
    model, processor = load_model_and_processor(cfg)
    trainer = build_dpo_trainer(cfg, model, processor, train_ds)
    t0 = time.perf_counter()
    if precompute:
        trainer.train_dataset = trainer.precompute_reference(trainer.train_dataset)
    ref_s = time.perf_counter() - t0
    result = trainer.train()
    return {"precompute": precompute, "s_per_step": result.metrics["train_runtime"] / args.steps,
            "reference_pass_s": ref_s if precompute else 0.0}


def main() -> int:
    import torch

    from evalsuite.kit.tiny import build_tiny_vlm
    from evalsuite.world.build import build_world

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--work", default=None, help="work dir (default: a temp dir)")
    args = p.parse_args()
    torch.set_num_threads(1)
    work = Path(args.work or tempfile.mkdtemp(prefix="dpo_bench_"))
    tiny = work / "tiny" if (work / "tiny" / "config.json").exists() else build_tiny_vlm(work / "tiny", seed=0)
    world = work / "world" if (work / "world" / "world.json").exists() else build_world(work / "world", images=64, seed=0)
    pairs = _pairs(world, work, n=args.batch * 4)
    _run(args, tiny, world, pairs, work / "warmup", precompute=False)  # first-call costs out of the timing
    rows = [_run(args, tiny, world, pairs, work / f"run{int(pc)}", precompute=pc) for pc in (False, True)]
    base, pre = rows
    print(f"{'reference':<26}{'s/step':>10}{'one-off ref pass (s)':>24}")
    for r in rows:
        name = "precomputed" if r["precompute"] else "per step (adapter off)"
        print(f"{name:<26}{r['s_per_step']:>10.4f}{r['reference_pass_s']:>24.3f}")
    print(f"ratio precomputed / per-step: {pre['s_per_step'] / base['s_per_step']:.3f} (target <= 0.7)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
