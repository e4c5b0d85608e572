"""Benchmark: build the HTML report from a store holding 10,000 per-sample records.

    python bench/report_build.py                       # 10,000 records, limits 30 s and 25 MB
    python bench/report_build.py --records 2000 --keep /tmp/bench-store

The store is filled through `Store.write_run` with TaskResults shaped like the chair, relevance, POPE
(lmms-eval's per-question results, three settings) and csr_pairs tasks' (3 checkpoint iterations;
records split between chair and relevance samples, POPE questions and training pairs), over small
synthetic PNG images. The build includes the paired bootstraps of every delta (1000 resamples). Prints build seconds and file size; exits 1 when a
limit is exceeded.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

OBJECTS = ["person", "dog", "cat", "car", "bicycle", "chair", "cup", "bottle", "horse", "umbrella"]


def make_images(root: Path, n: int, seed: int = 0) -> list[Path]:
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        im = Image.new("RGB", (96, 72), tuple(int(c) for c in rng.integers(150, 255, 3)))
        d = ImageDraw.Draw(im)
        for _ in range(3):
            x, y = int(rng.integers(0, 70)), int(rng.integers(0, 50))
            d.ellipse([x, y, x + 22, y + 18], fill=tuple(int(c) for c in rng.integers(0, 150, 3)))
        p = root / f"img_{i:05d}.png"
        im.save(p)
        paths.append(p)
    return paths


def _caption_sample(rng, i: int, image: Path, hal_rate: float) -> tuple[dict, dict]:
    gt = sorted(set(rng.choice(OBJECTS, 3, replace=False).tolist()))
    words = list(rng.choice(OBJECTS, 3, replace=False))
    answer = "A photo with " + ", ".join(f"a {w}" for w in words) + "."
    mentioned, pos = [], len("A photo with ")
    for w in words:
        pos = answer.index(w, pos)
        hal = w not in gt or bool(rng.random() < hal_rate)
        mentioned.append({"word": w, "category": w, "position": pos, "hallucinated": hal})
    hallucinated = [m["word"] for m in mentioned if m["hallucinated"]]
    base = {"key": f"val:{i}", "image_id": i, "image": str(image), "prompt": "Describe this image in detail.",
            "answer": answer}
    chair = {**base, "mentioned": mentioned, "hallucinated": hallucinated, "gt": gt,
             "chair_s": int(bool(hallucinated))}
    rel = float(min(1.0, max(0.0, rng.normal(0.6 - hal_rate, 0.12))))
    relevance = {**base, "relevance": rel, "relevance_sentences": [rel]}
    return chair, relevance


def _pope(rng, n: int, yes_bias: float):
    """n POPE questions in lmms-eval's record shape (a third per setting) and their accuracy."""
    from evalsuite.types import MetricValue, TaskResult

    settings = ("random", "popular", "adversarial")
    recs = []
    for i in range(n):
        truth = "yes" if i % 2 == 0 else "no"
        ans = "yes" if rng.random() < (0.8 if truth == "yes" else yes_bias) else "no"
        res = {"question_id": str(i), "score": float(ans == truth), "prediction": ans, "ground_truth": truth}
        recs.append({"key": f"pope/{i}", "image_id": str(i), "image": f"img_{i // 6:05d}", "answer": ans,
                     "prompt": f"Is there a {OBJECTS[i % len(OBJECTS)]} in the image?", "target": truth,
                     "doc": {"question": f"Is there a {OBJECTS[i % len(OBJECTS)]} in the image?",
                             "category": settings[i * 3 // n], "image_source": f"img_{i // 6:05d}"},
                     "pope_accuracy": res, "pope_f1_score": res})
    acc = sum(r["pope_accuracy"]["score"] for r in recs) / n
    return TaskResult("pope", "0.0", [MetricValue("pope_accuracy", acc, True, n)], samples=recs)


def fill_store(store_dir: Path, image_dir: Path, records: int, iterations: int = 3, seed: int = 0) -> None:
    """`records` per-sample records in all: chair + relevance per image per checkpoint, POPE
    questions, plus pairs."""
    import numpy as np

    from evalsuite.store import Store
    from evalsuite.types import MetricValue, TaskResult

    per_ckpt = records // iterations
    n_pairs = per_ckpt // 5
    n_pope = per_ckpt // 4 // 6 * 6
    n_images = (per_ckpt - n_pairs - n_pope) // 2
    images = make_images(image_dir, min(n_images, 400), seed)
    store = Store(store_dir)
    for it in range(iterations):
        rng = np.random.default_rng(seed + it)
        hal_rate = 0.3 - 0.08 * it
        chair, rel = zip(*(_caption_sample(rng, i, images[i % len(images)], hal_rate) for i in range(n_images)))
        cs = float(np.mean([s["chair_s"] for s in chair]))
        rv = float(np.mean([s["relevance"] for s in rel]))
        pairs = [{"id": f"p{it}-{j}", "image": str(images[j % len(images)]), "prompt": "Describe the image.",
                  "chosen": "A dog on grass.", "rejected": "A dog and a cat on a sofa.",
                  "chosen_reward": float(rng.normal(1.0 + 0.2 * it, 0.3)),
                  "rejected_reward": float(rng.normal(0.5, 0.3)),
                  "chosen_relevance": float(rng.normal(0.65, 0.1)),
                  "rejected_relevance": float(rng.normal(0.5, 0.1))} for j in range(n_pairs)]
        ch = float(np.mean([p["chosen_reward"] for p in pairs]))
        rj = float(np.mean([p["rejected_reward"] for p in pairs]))
        results = [
            TaskResult("chair", "1", [MetricValue("CHAIRs", cs, False, n_images, cs - 0.02, cs + 0.02)],
                       samples=list(chair)),
            TaskResult("relevance", "1", [MetricValue("relevance_mean", rv, True, n_images, rv - 0.01, rv + 0.01)],
                       samples=list(rel)),
            TaskResult("csr_pairs", "1", [MetricValue("chosen_reward_mean", ch, True, n_pairs),
                                          MetricValue("rejected_reward_mean", rj, True, n_pairs),
                                          MetricValue("reward_gap", ch - rj, True, n_pairs),
                                          MetricValue("num_pairs", n_pairs, True)], samples=pairs),
            _pope(rng, n_pope, 0.5 - 0.1 * it),
        ]
        store.write_run({"ckpt": f"/ckpts/iter{it}", "ckpt_hash": f"{it:064x}", "iteration": it,
                         "method": "base" if it == 0 else "csr", "config": {"iteration": it}}, results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--max-seconds", type=float, default=30.0)
    ap.add_argument("--max-mb", type=float, default=25.0)
    ap.add_argument("--keep", help="build in this folder (kept) instead of a temp one")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from evalsuite.report import build_report
    from evalsuite.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        fill_store(root / "store", root / "images", args.records)
        n = len(Store(root / "store").snapshot().samples())
        t0 = time.perf_counter()
        path = build_report(Store(root / "store"), root / "report")
        secs = time.perf_counter() - t0
        mb = path.stat().st_size / 2**20
    ok = secs < args.max_seconds and mb < args.max_mb
    print(f"records={n} build_seconds={secs:.2f} (limit {args.max_seconds}) size_mb={mb:.2f} "
          f"(limit {args.max_mb}) {'OK' if ok else 'OVER LIMIT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
