"""Task `relevance`: scores this run's answers, never generates twice, reports hand-checkable metrics."""
from __future__ import annotations

import re

import numpy as np
import pytest

from evalsuite.errors import UserError
from evalsuite.tasks.base import RunContext
from evalsuite.tasks.relevance import RelevanceOptions, RelevanceTask, relevance_metrics

PROMPT = "Please describe this image in detail."


def _records(world_dir, n=3):
    from evalsuite.tasks.coco import coco_images

    answers = ["a red cube. a blue ball!", "", "there is a cat on the left\nsky"]
    return [{"key": str(im["id"]), "image_id": im["id"], "image": im["path"], "prompt": PROMPT, "answer": a}
            for im, a in zip(coco_images(world_dir, "val")[:n], answers)]


def test_metrics_by_hand():
    """scores [1, 2, 6]: mean 3, median 2; pooled sentences [1, 3, 2, 6] -> 3; whole [0, 4, 5] -> 3."""
    samples = [{"key": "a", "relevance": 1.0, "relevance_whole": 0.0, "sentence_scores": [1.0]},
               {"key": "b", "relevance": 2.0, "relevance_whole": 4.0, "sentence_scores": [3.0, 2.0]},
               {"key": "c", "relevance": 6.0, "relevance_whole": 5.0, "sentence_scores": [6.0]}]
    m = {x.metric: x for x in relevance_metrics(samples)}
    assert m["relevance_mean"].value == 3.0 and m["relevance_mean"].n == 3
    assert m["relevance_mean"].ci_low <= 3.0 <= m["relevance_mean"].ci_high
    assert m["relevance_mean"].stderr == pytest.approx(np.sqrt(7.0 / 3.0))   # std(ddof=1)=sqrt(7), /sqrt(3)
    assert m["relevance_median"].value == 2.0
    assert m["relevance_sentence_mean"].value == 3.0 and m["relevance_sentence_mean"].n == 4
    assert m["relevance_whole_mean"].value == 3.0 and m["relevance_whole_mean"].variant == "whole"
    assert all(x.higher_is_better for x in m.values())
    # the per-sample values the table bootstraps are stored with the samples; the median has none
    assert samples[1]["values"] == {"relevance_mean": [2.0, 1.0], "relevance_sentence_mean": [5.0, 2.0],
                                    "relevance_whole_mean": [4.0, 1.0]}


def test_no_sentence_at_all_drops_sentence_mean_only(tmp_path):
    """Two empty answers: scores [0, 0], whole [0, 0], no sentence -> relevance_mean/median/whole_mean
    0 over n=2, and no relevance_sentence_mean (a mean of 0 sentences); the store takes the result."""
    from evalsuite.store import Store
    from evalsuite.types import TaskResult

    metrics = relevance_metrics([{"key": k, "relevance": 0.0, "relevance_whole": 0.0, "sentence_scores": []}
                                 for k in "12"])
    assert [(m.metric, m.value, m.n) for m in metrics] == [
        ("relevance_mean", 0.0, 2), ("relevance_median", 0.0, 2), ("relevance_whole_mean", 0.0, 2)]
    result = TaskResult("relevance", "1", metrics, samples=[{"key": "1"}, {"key": "2"}])
    Store(tmp_path / "store").write_run({"run_id": "r1"}, [result])
    assert sorted(Store(tmp_path / "store").snapshot().metrics()["metric"]) == [m.metric for m in metrics]


def test_requires_names_its_source():
    """source option first; else caption when the run has it or has neither; chair when only chair is there."""
    t = RelevanceTask()
    assert t.requires(RelevanceOptions(), ["relevance"]) == ("caption",)
    assert t.requires(RelevanceOptions(), ["chair", "relevance"]) == ("chair",)
    assert t.requires(RelevanceOptions(), ["caption", "chair", "relevance"]) == ("caption",)
    assert t.requires(RelevanceOptions(source="chair"), ["caption", "relevance"]) == ("chair",)


def test_needs_clip(world_dir, tmp_path):
    """Refused from the declaration of `clip`, naming its flag, before caption (its source) is planned."""
    from evalsuite.run import own_tasks_of_run
    from evalsuite.run_config import load_eval_config

    cfg, _ = load_eval_config(["--ckpt", "unused", "--tasks", "relevance", "--data-root", str(world_dir)])
    with pytest.raises(UserError, match=re.escape("relevance.clip: not given (task relevance needs it); pass --clip "
                                                  "DIR: a local CLIP/SigLIP checkpoint directory")):
        own_tasks_of_run(cfg, ["relevance"])


def _caption_plan(ctx):
    from evalsuite.tasks.caption import CaptionOptions, CaptionTask

    return CaptionTask().plan(ctx, CaptionOptions(), {})


def test_scores_given_answers_without_a_model(tiny_clip_dir, world_dir, tmp_path):
    """The answers come in as an argument: the checkpoint is never loaded; the scores equal the scorer's."""
    from evalsuite.metrics.relevance import RelevanceScorer

    recs = _records(world_dir)
    ctx = RunContext(ckpt="no-model-here", data_root=world_dir, output_dir=tmp_path, device="cpu")
    task = RelevanceTask()
    source = _caption_plan(ctx)
    plan = task.plan(ctx, RelevanceOptions(clip=str(tiny_clip_dir)), {"caption": source})
    assert plan.identity["source"] == {"task": "caption", "eval_key": source.eval_key}
    res = task.run(ctx, plan, {"caption": recs})
    assert not ctx.loader.loaded   # nothing was generated: the checkpoint was never even loaded
    assert (res.task, res.version, len(res.samples)) == ("relevance", "1", 3)
    assert res.eval_key == plan.eval_key
    assert res.config["response_score"] == "sentence_mean" and res.config["source"]["task"] == "caption"
    direct = RelevanceScorer(tiny_clip_dir, device="cpu").score_responses([(r["image"], r["answer"]) for r in recs])
    for s, d in zip(res.samples, direct):
        assert s["relevance"] == pytest.approx(d.mean, abs=1e-6)
        assert s["relevance_whole"] == pytest.approx(d.whole, abs=1e-6)
        assert s["sentences"] == d.sentences
    assert res.samples[1]["relevance"] == 0.0 and res.samples[1]["sentences"] == []   # empty answer
    m = {x.metric: x.value for x in res.metrics}
    scores = [s["relevance"] for s in res.samples]
    assert m["relevance_mean"] == pytest.approx(np.mean(scores))
    assert m["relevance_median"] == pytest.approx(np.median(scores))
    assert m["relevance_sentence_mean"] == pytest.approx(np.mean([x for s in res.samples for x in s["sentence_scores"]]))
