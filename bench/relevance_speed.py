"""Relevance scoring speed with and without the image-embedding cache (texts/s, peak memory).

    .venv/bin/python bench/relevance_speed.py              # 50 images x 20 sentences, both tiny shapes
    .venv/bin/python bench/relevance_speed.py --check      # exit 1 unless the cache gives >= 5x (clip-l shape)

The workload is CSR's: for each image, score its 20 candidate sentences in one call (siblings of a
search tree). Without the cache every (image, sentence) item encodes its image, as calling
`CLIPModel(**processor(text=[s], images=img))` per sentence does; with it each image is encoded once.

Two tiny CLIPs from the kit (random weights, same text tower, 2 layers, 64 wide, <= 32 tokens):
  * `kit-32px`: the test default, 32 px / patch 4 = 65 vision tokens. Here text and image towers cost
    about the same, so the cache cannot help much and this row is only a reference;
  * `clip-l-tokens`: 336 px / patch 14 = 577 vision tokens, the token count of CLIP ViT-L/14-336 that
    CSR uses. Real CLIP's vision tower is ~24 layers x 577 tokens against a 12 layer text tower on
    <= 77 tokens, so this shape is still kinder to the no-cache path than real CLIP is.
Images are 640x480 PNGs (COCO size), so decoding + resizing is part of the image path, as in real use.
Each mode runs in a fresh interpreter so its peak RSS (ru_maxrss) is its own.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {"kit-32px": {"image_size": 32, "patch_size": 4}, "clip-l-tokens": {"image_size": 336, "patch_size": 14}}


def _make_data(root: Path, n_images: int, n_sentences: int) -> dict:
    """640x480 PNGs (smooth colour fields + noise, so PNG decode is not trivial) and sentences."""
    import numpy as np
    from PIL import Image

    from evalsuite.world.vocab import corpus

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:480, 0:640]
    images = []
    for i in range(n_images):
        base = np.stack([(xx * (i + 1) + yy) % 256, (yy * 3 + i * 17) % 256, (xx + yy * (i % 7)) % 256], -1)
        arr = np.clip(base + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8)
        images.append(str(root / f"img{i:03d}.png"))
        Image.fromarray(arr).save(images[-1])
    sentences = [s for s in corpus() if len(s.split()) >= 4]
    per_image = [[sentences[(i * n_sentences + j) % len(sentences)] for j in range(n_sentences)]
                 for i in range(n_images)]
    return {"images": images, "sentences": per_image}


def _worker(clip: str, data: str, cache: bool, batch_size: int, threads: int) -> dict:
    import torch

    from evalsuite.metrics.relevance import RelevanceScorer

    torch.set_num_threads(threads)
    d = json.loads(Path(data).read_text())
    scorer = RelevanceScorer(clip, device="cpu", batch_size=batch_size, cache_images=cache)
    scorer.score_texts([(d["images"][0], "warm up the kernels")])   # first-call overheads, not timed
    scorer._cache.clear()
    scorer.stats = {k: 0 for k in scorer.stats}
    n_texts = 0
    t0 = time.perf_counter()
    for image, sents in zip(d["images"], d["sentences"]):
        scorer.score_texts([(image, s) for s in sents])
        n_texts += len(sents)
    dt = time.perf_counter() - t0
    return {"texts": n_texts, "seconds": dt, "texts_per_s": n_texts / dt, **scorer.stats,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _run_mode(clip: Path, data: Path, cache: bool, args) -> dict:
    cmd = [sys.executable, __file__, "--_worker", str(clip), str(data), "1" if cache else "0",
           "--batch-size", str(args.batch_size), "--threads", str(args.threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=50)
    p.add_argument("--sentences", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list of {list(SHAPES)}")
    p.add_argument("--check", action="store_true", help="exit 1 unless clip-l-tokens shows >= 5x")
    p.add_argument("--_worker", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._worker:
        clip, data, cache = args._worker
        print(json.dumps(_worker(clip, data, cache == "1", args.batch_size, args.threads)))
        return 0

    from evalsuite.kit.tiny import build_tiny_clip

    speedups = {}
    with tempfile.TemporaryDirectory(prefix="relbench-") as tmp:
        tmp = Path(tmp)
        data = tmp / "data.json"
        data.write_text(json.dumps(_make_data(tmp, args.images, args.sentences)))
        print(f"{args.images} images x {args.sentences} sentences, batch {args.batch_size}, "
              f"{args.threads} thread(s), cpu")
        print(f"{'shape':14s} {'cache':5s} {'texts/s':>9s} {'seconds':>8s} {'img enc':>8s} {'peak RSS MiB':>13s}")
        for shape in args.shapes.split(","):
            clip = build_tiny_clip(tmp / shape, seed=0, **SHAPES[shape])
            rows = {cache: _run_mode(clip, data, cache, args) for cache in (False, True)}
            for cache, r in rows.items():
                print(f"{shape:14s} {'on' if cache else 'off':5s} {r['texts_per_s']:9.1f} {r['seconds']:8.2f} "
                      f"{r['image_encodes']:8d} {r['peak_rss_mib']:13.1f}")
            speedups[shape] = rows[True]["texts_per_s"] / rows[False]["texts_per_s"]
            print(f"{shape:14s} cache speed-up: {speedups[shape]:.1f}x")
    if args.check and speedups.get("clip-l-tokens", 0.0) < 5.0:
        print("FAIL: the image-embedding cache gives < 5x on the clip-l-tokens shape", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
