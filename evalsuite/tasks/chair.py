"""Task `chair`: caption sampled COCO images with the checkpoint and score object hallucination.

Options (`ctx.options`, all optional): split ("val"), prompt ("Please describe this image in
detail."), n_images (500), seed (0), variant ("original"), max_new_tokens (512; decoding is the
run's, greedy by default), cache_dir (GT cache; default DATA_ROOT/.evalsuite_cache), nltk_data, n_boot.

GT is built from the split's own COCO annotations (instances + reference captions) with the
variant's GT normaliser, and cached by the annotation files' content. Generations are kept in
`ctx.generations[("chair", split, prompt)]` so `relevance` can reuse them.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from pathlib import Path

from evalsuite.tasks.base import RunContext
from evalsuite.types import MetricValue, TaskResult

log = logging.getLogger(__name__)
DEFAULT_PROMPT = "Please describe this image in detail."


def sample_images(images: list[dict], n: int, seed: int) -> list[dict]:
    """`n` images drawn without replacement with `seed` from the id-sorted list, kept in id order."""
    ordered = sorted(images, key=lambda im: im["id"])
    if n >= len(ordered):
        return ordered
    picked = random.Random(seed).sample(range(len(ordered)), n)
    return [ordered[i] for i in sorted(picked)]


def _metric_values(summary: dict, variant: str) -> list[MetricValue]:
    n, ci = summary["num_caps"], summary["ci"]
    # Len is context for the other three (longer captions mention more), not a goal.
    spec = [("CHAIRs", False), ("CHAIRi", False), ("Recall", True), ("Len", True)]
    return [
        MetricValue(name, float(summary[name]), higher_is_better=hib, n=n,
                    ci_low=ci[name][0] if name in ci else None, ci_high=ci[name][1] if name in ci else None,
                    variant=variant)
        for name, hib in spec
    ]


class ChairTask:
    name = "chair"
    version = "1"

    def run(self, ctx: RunContext) -> TaskResult:
        from evalsuite.metrics import chair, chair_io, nltk_resources
        from evalsuite.tasks.caption import coco_images, data_fingerprint, generate_for_images
        from evalsuite.world.layout import CocoLayout

        opt = ctx.options
        split, prompt = opt.get("split", "val"), opt.get("prompt", DEFAULT_PROMPT)
        variant = chair.get_variant(opt.get("variant", chair.DEFAULT_VARIANT))
        n_images, seed = int(opt.get("n_images", 500)), int(opt.get("seed", 0))
        # Load the scorer first: missing NLTK data must fail before the model generates anything.
        nltk_resources.add_data_dir(opt.get("nltk_data"))
        scorer = chair.ChairScorer(variant.name)
        layout = CocoLayout(ctx.data_root, split)
        cache_dir = Path(opt.get("cache_dir") or Path(ctx.data_root) / ".evalsuite_cache")
        gt, gt_meta = chair_io.gt_from_coco([layout.instances_json], [layout.captions_json], variant.gt, cache_dir)

        images = sample_images(coco_images(ctx.data_root, split), n_images, seed)[: ctx.limit]
        gen = ctx.gen
        if "max_new_tokens" in opt:
            gen = dataclasses.replace(gen, max_new_tokens=int(opt["max_new_tokens"]))
        ctx.gen, saved = gen, ctx.gen  # generate_for_images uses the context's decoding settings
        try:
            generations = generate_for_images(ctx, self.name, images, split, prompt)
        finally:
            ctx.gen = saved
        records = chair.score_captions(scorer, [(g["image_id"], g["answer"]) for g in generations], gt,
                                       source=f"{layout.captions_json}")
        summary = chair.summarize(records, variant.name, n_boot=int(opt.get("n_boot", 1000)), seed=seed)
        samples = [{**g, **{k: v for k, v in r.items() if k not in ("index", "image_id")}}
                   for g, r in zip(generations, records)]
        return TaskResult(
            task=self.name, version=self.version, metrics=_metric_values(summary, variant.name), samples=samples,
            config={"split": split, "prompt": prompt, "n_images": n_images, "seed": seed, "limit": ctx.limit,
                    "variant": variant.name, "gen": gen.to_dict()},
            identity={"data": data_fingerprint(ctx.data_root, split), "split": split, "prompt": prompt,
                      "n_images": n_images, "seed": seed, "image_ids": [im["id"] for im in images],
                      "variant": variant.name, "gen": gen.to_dict()},
            extra={"counts": {k: summary[k] for k in chair.COUNT_KEYS}, "variant": variant.name,
                   "normalizer": variant.normalizer, "gt_normalizer": variant.gt, "gt": gt_meta,
                   "nltk_resources": nltk_resources.resource_checksums(scorer.resources)},
        )
