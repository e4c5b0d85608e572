"""Task `relevance`: CLIP image-relevance of the answers this run generated.

    evalsuite run --ckpt CKPT --tasks caption,relevance --clip /models/clip-vit-large-patch14-336

It scores answers already in `ctx.generations` (those of `caption`, else `chair`, of the run's split
and, if given, prompt), so the model never answers twice; with no such answers it runs the caption
task itself, which leaves its answers in `ctx.generations` for any later task. Scores are defined in
`evalsuite.metrics.relevance`; the per-response score is the mean over sentences (`response_score`
in the config), and the whole-response score is reported alongside as `relevance_whole_mean`.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from evalsuite.errors import UserError
from evalsuite.tasks.base import RunContext
from evalsuite.types import MetricValue, TaskResult

log = logging.getLogger(__name__)

SOURCE_TASKS = ("caption", "chair")   # whose generations are reused, in order of preference


def find_generations(ctx: RunContext) -> tuple[tuple, list[dict]] | None:
    """(key, records) of this run's answers to score, or None when the run has none yet."""
    split, prompt = ctx.options.get("split"), ctx.options.get("prompt")
    for task in SOURCE_TASKS:
        for key, records in ctx.generations.items():
            if len(key) < 3 or key[0] != task:
                continue
            if (split is None or key[1] == split) and (prompt is None or key[2] == prompt):
                return key, records
    return None


def _image_path(ctx: RunContext, image: str) -> Path:
    """Generation records hold image paths; relative ones are taken under the data root."""
    from evalsuite.files import safe_join

    p = Path(image)
    return p if p.is_absolute() or p.exists() else safe_join(ctx.data_root, image)


def relevance_metrics(scores: np.ndarray, whole: np.ndarray, sentence_scores: list[float]) -> list[MetricValue]:
    """relevance_mean (bootstrap CI), _median, _sentence_mean (all sentences pooled), _whole_mean."""
    from evalsuite.metrics.stats import bootstrap_ci

    n = len(scores)
    lo, hi = bootstrap_ci(scores, np.mean)
    mean = float(np.mean(scores)) if n else float("nan")
    return [
        MetricValue("relevance_mean", mean, higher_is_better=True, n=n, ci_low=lo, ci_high=hi,
                    stderr=float(np.std(scores, ddof=1) / np.sqrt(n)) if n > 1 else None),
        MetricValue("relevance_median", float(np.median(scores)) if n else float("nan"), True, n=n),
        MetricValue("relevance_sentence_mean", float(np.mean(sentence_scores)) if sentence_scores else 0.0,
                    True, n=len(sentence_scores)),
        MetricValue("relevance_whole_mean", float(np.mean(whole)) if n else float("nan"), True, n=n,
                    variant="whole"),
    ]


class RelevanceTask:
    name = "relevance"
    version = "1"

    def run(self, ctx: RunContext) -> TaskResult:
        from evalsuite.metrics.relevance import RESPONSE_SCORE, RelevanceScorer, clip_family

        clip = ctx.options.get("clip")
        if not clip:
            raise UserError("relevance: needs --clip DIR (a local CLIP/SigLIP checkpoint directory)")
        clip_family(Path(clip))   # a bad --clip fails now, not after minutes of caption generation
        found = find_generations(ctx)
        if found is None:
            log.info("relevance: no answers from %s in this run; running the caption task", "/".join(SOURCE_TASKS))
            from evalsuite.tasks.caption import CaptionTask

            CaptionTask().run(ctx)
            found = find_generations(ctx)
            if found is None:   # the caption task keys its answers by the run's split and prompt
                raise UserError("relevance: the caption task left no answers for this split/prompt")
        key, records = found
        records = records[: ctx.limit]
        scorer = RelevanceScorer(clip, device=ctx.device, batch_size=int(ctx.options.get("clip_batch_size", 32)))
        scored = scorer.score_responses([(_image_path(ctx, r["image"]), r["answer"]) for r in records],
                                        progress=True)
        samples = [
            {**r, "relevance": s.score, "relevance_whole": s.whole, "whole_cosine": s.whole_cosine,
             "sentences": s.sentences, "sentence_scores": s.sentence_scores, "sentence_cosines": s.sentence_cosines}
            for r, s in zip(records, scored)
        ]
        metrics = relevance_metrics(np.array([s.score for s in scored]), np.array([s.whole for s in scored]),
                                    [x for s in scored for x in s.sentence_scores])
        config = {**scorer.describe(), "source": {"task": key[0], "split": key[1], "prompt": key[2]},
                  "limit": ctx.limit, "response_score": RESPONSE_SCORE}
        return TaskResult(task=self.name, version=self.version, metrics=metrics, samples=samples, config=config,
                          extra={"clip_hash": _clip_hash(clip)})


def _clip_hash(clip: str) -> str | None:
    """Content hash of the CLIP weights, so a result names the judge that produced it."""
    from evalsuite.manifest import checkpoint_hash

    return checkpoint_hash(clip)
