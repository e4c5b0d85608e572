"""Task `chair`: caption sampled COCO images with the checkpoint and score object hallucination.

Options: the `chair:` section of the eval config (`ChairOptions`, each field's help in `evalsuite run
--help`); decoding is the run's (`gen:`, greedy by default). GT is built from the split's own COCO
annotations (instances + reference captions) with the variant's GT normaliser, and cached by the
annotation files' content.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evalsuite.config import check_fields, opt
from evalsuite.errors import UserError
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.tasks.coco import DEFAULT_PROMPT, answer_identity, check_prompt, coco_images
from evalsuite.tasks.metric_spec import MetricSpec, score
from evalsuite.types import TaskResult

log = logging.getLogger(__name__)


@dataclass
class ChairOptions:
    split: str = opt("val", "split of the data root (val, val2014, ...)", alias="split")
    prompt: str = opt(DEFAULT_PROMPT, "the captioning prompt", alias="prompt")
    n_images: int = opt(500, "images sampled from the split", alias="chair_images", ge=1)
    seed: int | None = opt(None, "image sample seed (null = the run's seed)")
    variant: Literal["original", "opera", "opera_lemma"] = opt("original", "CHAIR variant (evalsuite/metrics/chair.py)",
                                                                    alias="variant")
    tokenizer: Literal["nltk38", "nltk310"] = opt(
        "nltk38", "word tokenizer rules: NLTK <= 3.8's (the reference scripts') or 3.10's "
        "(evalsuite/metrics/chair_tokenize.py)")
    # identity False: the resolved value is in the identity already (gen.max_new_tokens), or the
    # option cannot change a number (where the GT cache lives; NLTK data enters by its checksums)
    max_new_tokens: int | None = opt(None, "token cap of a caption (null = the run's gen.max_new_tokens)",
                                     identity=False, ge=1)
    cache_dir: str | None = opt(None, "GT cache dir (null = ~/.cache/evalsuite/chair_gt)", identity=False)
    nltk_data: str | None = opt(None, "an NLTK data dir searched first", path="dir", identity=False)
    # bootstrap resamples of the confidence intervals: changes a CI, never a value (not identity)
    n_boot: int = opt(1000, "bootstrap resamples of the confidence intervals (0 = none)", identity=False, ge=0)

    def __post_init__(self) -> None:
        check_fields(self, "chair")
        check_prompt("chair", self.prompt)
        if self.nltk_data is not None and not Path(self.nltk_data).is_dir():
            raise UserError(f"chair.nltk_data: {self.nltk_data}: no such directory")
        from evalsuite.metrics.chair_tokenize import get_tokenizer

        get_tokenizer(self.tokenizer, "chair.tokenizer")


def sample_images(images: list[dict], n: int, seed: int) -> list[dict]:
    """`n` images drawn without replacement with `seed` from the id-sorted list, kept in id order."""
    ordered = sorted(images, key=lambda im: im["id"])
    if n >= len(ordered):
        return ordered
    picked = random.Random(seed).sample(range(len(ordered)), n)
    return [ordered[i] for i in sorted(picked)]


# CHAIR per caption (evalsuite/metrics/chair.py `aggregate`): CHAIRs is the share of captions with a
# hallucination, CHAIRi and Recall ratios of sums over captions. Len is context for the other three
# (longer captions mention more), not a goal: a diagnostic.
METRICS = (
    MetricSpec("CHAIRs", "down", lambda s: (s["CHAIRs"], 1)),
    MetricSpec("CHAIRi", "down", lambda s: (len(s["hallucinated"]), len(s["mentions"]))),
    MetricSpec("Recall", "up", lambda s: (len(s["recalled"]), len(s["gt_objects"]))),
    MetricSpec("Len", "none", lambda s: (s["n_tokens"], 1)),
)


class ChairTask:
    name = "chair"
    version = "1"
    Options = ChairOptions
    metrics = METRICS

    def requires(self, opts: ChairOptions, tasks: list[str]) -> tuple[str, ...]:
        return ()

    def plan(self, ctx: RunContext, opts: ChairOptions, sources: dict) -> Plan:
        """Scorer, GT and image sample: missing NLTK data or annotations fail before the model loads."""
        from evalsuite.metrics import chair, chair_io, nltk_resources
        from evalsuite.identity import digest, file_fingerprint
        from evalsuite.world.layout import CocoLayout

        variant = chair.get_variant(opts.variant)
        nltk_resources.add_data_dir(opts.nltk_data, "chair.nltk_data")
        scorer = chair.ChairScorer(variant.name, tokenizer=opts.tokenizer)
        layout = CocoLayout(ctx.data_root, opts.split)
        files = [layout.instances_json, layout.captions_json]
        seed = ctx.gen.seed if opts.seed is None else opts.seed
        images = sample_images(coco_images(ctx.data_root, opts.split), opts.n_images, seed)[: ctx.limit]
        if not images:
            raise UserError(f"chair: split {opts.split!r} of {ctx.data_root} has no images")
        gt, gt_meta = chair_io.gt_from_coco(files[:1], files[1:], variant.gt,
                                            Path(opts.cache_dir) if opts.cache_dir else None, opts.tokenizer)
        gen = ctx.gen if opts.max_new_tokens is None else dataclasses.replace(ctx.gen, max_new_tokens=opts.max_new_tokens)
        data = file_fingerprint(files)
        resources = nltk_resources.resource_checksums(scorer.resources)
        identity = {**answer_identity(ctx, data, opts.split, [im["id"] for im in images], opts.prompt, gen),
                    "seed": seed, "variant": variant.name,
                    # by content: where the NLTK data lies changes no number
                    "nltk": {res: r["sha256"] for res, r in resources.items()}}
        # answers are keyed by the images' own data (instances), so caption's answers serve chair too
        state = {"images": images, "gen": gen, "data_id": digest(file_fingerprint(files[:1])), "scorer": scorer, "gt": gt,
                 "extra": {"variant": variant.name, "tokenizer": opts.tokenizer, "normalizer": variant.normalizer,
                           "gt_normalizer": variant.gt,
                           "gt": gt_meta, "nltk_resources": resources},
                 "source": str(layout.captions_json)}
        return Plan.of(self, opts, identity, {"seed": seed, "variant": variant.name, "limit": ctx.limit,
                                              "gen": gen.to_dict()}, state)

    def answers(self, ctx: RunContext, plan: Plan) -> list[dict] | None:
        from evalsuite.tasks.answers import generate_answers

        s = plan.state
        return generate_answers(ctx, s["images"], plan.config["prompt"], s["gen"], s["data_id"], task=self.name)

    def run(self, ctx: RunContext, plan: Plan, inputs: dict) -> TaskResult | None:
        from evalsuite.metrics import chair

        generations = self.answers(ctx, plan)
        if generations is None:  # a data-parallel rank other than 0
            return None
        s, variant = plan.state, plan.config["variant"]
        records = chair.score_captions(s["scorer"], [(g["image_id"], g["answer"]) for g in generations], s["gt"],
                                       source=s["source"])
        counts = chair.aggregate(records)
        samples = [{**g, **{k: v for k, v in r.items() if k not in ("index", "image_id")}}
                   for g, r in zip(generations, records)]
        metrics = score(samples, METRICS, n_boot=plan.config["n_boot"], seed=plan.config["seed"],
                        variant=variant)
        return plan.result(metrics, samples, {"counts": {k: counts[k] for k in chair.COUNT_KEYS}, **s["extra"]})
