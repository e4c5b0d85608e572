"""Task `relevance`: CLIP image-relevance of the answers another task of this run generated.

    evalsuite run --ckpt CKPT --tasks caption,relevance --clip /models/clip-vit-large-patch14-336 --data-root D

Options: the `relevance:` section (`RelevanceOptions`; `clip` is required). It scores the answers of
its source task, which it declares in `requires`: `source`, else caption if it is in the run, else chair
if it is, else caption, which then runs as a dependency (its answers are used, its own result is not
stored). So the model never answers twice. Scores are defined in `evalsuite.metrics.relevance`; the per-response score is the mean
over sentences (`response_score` in the config), and the whole-response score is reported alongside as
`relevance_whole_mean`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from evalsuite.config import check_fields, opt
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.tasks.metric_spec import MetricSpec, score
from evalsuite.types import MetricValue, TaskResult

log = logging.getLogger(__name__)


@dataclass
class RelevanceOptions:
    # identity False: the judge enters by its weights' hash, the source by its eval_key; batching
    # does not change a score
    clip: str | None = opt(None, "a local CLIP/SigLIP checkpoint directory (required)", path="dir", identity=False,
                           alias="clip", required="a local CLIP/SigLIP checkpoint directory")
    batch_size: int = opt(32, "CLIP batch size", identity=False, ge=1)
    source: Literal["caption", "chair"] | None = opt(
        None, "the task whose answers are scored (null = caption if in the run, else chair if it is, else caption)",
        identity=False)

    def __post_init__(self) -> None:
        check_fields(self, "relevance")


def _image_path(ctx: RunContext, image: str) -> Path:
    """Generation records hold image paths; relative ones are taken under the data root."""
    from evalsuite.files import safe_join

    p = Path(image)
    return p if p.is_absolute() or p.exists() else safe_join(ctx.data_root, image)


# Per answer, except the sentence mean that pools every sentence of every answer; the median has no
# per-sample form (no sum gives it), so it has no sample CI and no paired delta.
METRICS = (
    MetricSpec("relevance_mean", "up", lambda s: (s["relevance"], 1)),
    MetricSpec("relevance_median", "up", None),
    MetricSpec("relevance_sentence_mean", "up", lambda s: (sum(s["sentence_scores"]), len(s["sentence_scores"]))),
    MetricSpec("relevance_whole_mean", "up", lambda s: (s["relevance_whole"], 1), variant="whole"),
)


def relevance_metrics(samples: list[dict], n_boot: int = 1000, seed: int = 0) -> list[MetricValue]:
    """relevance_mean (bootstrap CI, stderr), _median, _sentence_mean (all sentences pooled), _whole_mean
    from scored samples ({relevance, relevance_whole, sentence_scores}), whose per-sample values it fills.
    _sentence_mean is left out when no answer has a sentence (all empty): a mean of nothing is no number."""
    scores = np.array([s["relevance"] for s in samples], dtype=float)
    n = len(scores)
    metrics = {m.metric: m for m in score(samples, METRICS, n_boot=n_boot, seed=seed)}
    if n > 1:
        metrics["relevance_mean"].stderr = float(np.std(scores, ddof=1) / np.sqrt(n))
    if not any(s["sentence_scores"] for s in samples):
        metrics.pop("relevance_sentence_mean", None)
    else:
        metrics["relevance_sentence_mean"].n = sum(len(s["sentence_scores"]) for s in samples)
    metrics["relevance_median"] = MetricValue("relevance_median", float(np.median(scores)) if n else float("nan"),
                                              True, n=n)
    return [metrics[spec.name] for spec in METRICS if spec.name in metrics]


class RelevanceTask:
    name = "relevance"
    version = "1"
    Options = RelevanceOptions
    metrics = METRICS
    density = "relevance"   # the per-sample field whose distribution the report draws per checkpoint

    def requires(self, opts: RelevanceOptions, tasks: list[str]) -> tuple[str, ...]:
        if opts.source:
            return (opts.source,)
        return ("chair",) if "chair" in tasks and "caption" not in tasks else ("caption",)

    def plan(self, ctx: RunContext, opts: RelevanceOptions, sources: dict[str, Plan]) -> Plan:
        from evalsuite.metrics.relevance import RESPONSE_SCORE, clip_family

        family = clip_family(Path(opts.clip))   # a bad --clip fails now, not after minutes of generation
        (source,) = sources.values()
        clip_hash = _clip_hash(opts.clip)
        identity = {"source": {"task": source.task, "eval_key": source.eval_key},
                    "clip_hash": clip_hash, "clip_family": family, "response_score": RESPONSE_SCORE}
        resolved = {"source": {"task": source.task, "split": source.config.get("split"),
                               "prompt": source.config.get("prompt")},
                    "limit": ctx.limit, "response_score": RESPONSE_SCORE}
        return Plan.of(self, opts, identity, resolved, state={"clip": opts.clip, "clip_hash": clip_hash})

    def run(self, ctx: RunContext, plan: Plan, inputs: dict[str, list[dict]]) -> TaskResult | None:
        from evalsuite.metrics.relevance import RelevanceScorer

        if not ctx.dist.is_main:  # scoring is cheap next to generation: rank 0 alone scores
            return None
        (records,) = inputs.values()
        scorer = RelevanceScorer(plan.state["clip"], device=ctx.device, batch_size=plan.config["batch_size"])
        scored = scorer.score_responses([(_image_path(ctx, r["image"]), r["answer"]) for r in records],
                                        progress=True)
        samples = [
            {**r, "relevance": s.score, "relevance_whole": s.whole, "whole_cosine": s.whole_cosine,
             "sentences": s.sentences, "sentence_scores": s.sentence_scores, "sentence_cosines": s.sentence_cosines}
            for r, s in zip(records, scored)
        ]
        metrics = relevance_metrics(samples)
        return plan.result(metrics, samples, {"clip_hash": plan.state["clip_hash"]},
                           config={**scorer.describe(), **plan.config})


def _clip_hash(clip: str) -> str | None:
    """Content hash of the CLIP weights, so a result names the judge that produced it."""
    from evalsuite.manifest import checkpoint_hash

    return checkpoint_hash(clip)
