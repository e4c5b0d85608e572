"""Task `relevance`: scores this run's answers, never generates twice, reports hand-checkable metrics."""
from __future__ import annotations

import numpy as np
import pytest

from evalsuite.errors import UserError
from evalsuite.tasks.base import RunContext
from evalsuite.tasks.relevance import RelevanceTask, find_generations, relevance_metrics

PROMPT = "Please describe this image in detail."


class CountingContext(RunContext):
    """A real RunContext that counts generate() calls (the model is still the real tiny VLM)."""

    calls = 0

    def generate(self, requests, gen=None):
        type(self).calls += 1
        return super().generate(requests, gen)


def _records(world_dir, n=3):
    from evalsuite.tasks.caption import coco_images

    answers = ["a red cube. a blue ball!", "", "there is a cat on the left\nsky"]
    return [{"key": str(im["id"]), "image_id": im["id"], "image": im["path"], "prompt": PROMPT, "answer": a}
            for im, a in zip(coco_images(world_dir, "val")[:n], answers)]


def test_metrics_by_hand():
    """scores [1, 2, 6]: mean 3, median 2; pooled sentences [1, 3, 2, 6] -> 3; whole [0, 4, 5] -> 3."""
    m = {x.metric: x for x in relevance_metrics(np.array([1.0, 2.0, 6.0]), np.array([0.0, 4.0, 5.0]),
                                                [1.0, 3.0, 2.0, 6.0])}
    assert m["relevance_mean"].value == 3.0 and m["relevance_mean"].n == 3
    assert m["relevance_mean"].ci_low <= 3.0 <= m["relevance_mean"].ci_high
    assert m["relevance_mean"].stderr == pytest.approx(np.sqrt(7.0 / 3.0))   # std(ddof=1)=sqrt(7), /sqrt(3)
    assert m["relevance_median"].value == 2.0
    assert m["relevance_sentence_mean"].value == 3.0 and m["relevance_sentence_mean"].n == 4
    assert m["relevance_whole_mean"].value == 3.0 and m["relevance_whole_mean"].variant == "whole"
    assert all(x.higher_is_better for x in m.values())


def test_find_generations_prefers_caption_and_filters_split_and_prompt(tmp_path):
    ctx = RunContext(ckpt="unused", data_root=tmp_path, output_dir=tmp_path, options={"split": "val"})
    ctx.generations = {("chair", "val", PROMPT): [{"c": 1}], ("caption", "train", PROMPT): [{"t": 1}]}
    assert find_generations(ctx) == (("chair", "val", PROMPT), [{"c": 1}])
    ctx.generations[("caption", "val", PROMPT)] = [{"v": 1}]
    assert find_generations(ctx)[0] == ("caption", "val", PROMPT)
    ctx.options["prompt"] = "other"
    assert find_generations(ctx) is None


def test_needs_clip(tmp_path):
    ctx = RunContext(ckpt="unused", data_root=tmp_path, output_dir=tmp_path)
    with pytest.raises(UserError, match="--clip"):
        RelevanceTask().run(ctx)


def test_scores_existing_generations_without_a_model(tiny_clip_dir, world_dir, tmp_path):
    from evalsuite.metrics.relevance import RelevanceScorer

    recs = _records(world_dir)
    ctx = RunContext(ckpt="no-model-here", data_root=world_dir, output_dir=tmp_path,
                     options={"clip": str(tiny_clip_dir), "split": "val"},
                     generations={("caption", "val", PROMPT): recs})
    res = RelevanceTask().run(ctx)
    assert ctx._vlm is None   # nothing was generated: the checkpoint was never even loaded
    assert (res.task, res.version, len(res.samples)) == ("relevance", "1", 3)
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


@pytest.mark.slow
def test_runs_caption_once_when_the_run_has_no_answers(tiny_vlm_dir, tiny_clip_dir, world_dir, tmp_path):
    from evalsuite.tasks.caption import CaptionTask
    from evalsuite.types import GenConfig

    CountingContext.calls = 0
    ctx = CountingContext(ckpt=str(tiny_vlm_dir), data_root=world_dir, output_dir=tmp_path, limit=2,
                          gen=GenConfig(max_new_tokens=6), device="cpu",
                          options={"clip": str(tiny_clip_dir), "split": "val"})
    res = RelevanceTask().run(ctx)
    assert CountingContext.calls == 1 and list(ctx.generations) == [("caption", "val", PROMPT)]
    assert len(res.samples) == 2 and all("relevance" in s for s in res.samples)
    CaptionTask().run(ctx)        # caption after relevance reuses the same answers
    RelevanceTask().run(ctx)
    assert CountingContext.calls == 1
