"""Task `chair` end to end on the tiny VLM and the synthetic world (val split, GT from its annotations)."""
from __future__ import annotations

import json
from pathlib import Path



def test_chair_task_on_tiny_model(tiny_vlm_dir, world_dir, nltk_models_dir, tmp_path):
    from evalsuite.metrics.chair import aggregate
    from evalsuite.tasks.base import RunContext
    from evalsuite.tasks.registry import load_task
    from evalsuite.types import GenConfig

    ctx = RunContext(ckpt=str(tiny_vlm_dir), data_root=Path(world_dir), output_dir=tmp_path, batch_size=4,
                     gen=GenConfig(max_new_tokens=8), resume_root=tmp_path / "resume", ckpt_id="ck")
    task = load_task("chair")
    opts = task.Options(n_images=5, seed=0, cache_dir=str(tmp_path / "cache"), nltk_data=str(nltk_models_dir),
                        n_boot=20)
    plan = task.plan(ctx, opts, {})
    assert not ctx.loader.loaded   # planning (scorer, GT, image sample, identity) needs no model
    result = task.run(ctx, plan, {})
    assert (result.task, result.version) == ("chair", "1")
    assert [m.metric for m in result.metrics] == ["CHAIRs", "CHAIRi", "Recall", "Len"]
    assert [m.higher_is_better for m in result.metrics][:2] == [False, False]
    assert all(m.n == 5 and m.variant == "original" for m in result.metrics)
    assert len(result.samples) == 5
    s = result.samples[0]
    assert {"key", "image_id", "image", "prompt", "answer", "mentions", "positions", "hallucinated",
            "gt_objects", "recalled", "n_tokens", "CHAIRs", "CHAIRi"} <= set(s)
    # the metric values are the aggregate of the samples' own records
    agg = aggregate(result.samples)
    assert {m.metric: m.value for m in result.metrics} == {k: agg[k] for k in ("CHAIRs", "CHAIRi", "Recall", "Len")}
    assert result.extra["counts"]["num_caps"] == 5
    assert "tokenizers/punkt_tab/english" in result.extra["nltk_resources"]
    # GT came from the world's val annotations and is cached; every sampled image has GT objects
    assert list((tmp_path / "cache").glob("chair_gt_pattern_*.json.gz"))
    assert all(x["gt_objects"] for x in result.samples)
    # the identity names what the numbers depend on; the answers are in the resume cache
    assert result.identity["variant"] == "original" and len(result.identity["image_ids"]) == 5
    assert result.identity["gen"]["max_new_tokens"] == 8 and result.eval_key == plan.eval_key
    assert len((tmp_path / "resume" / "own" / "ck" / "answers.rank0.jsonl").read_text().splitlines()) == 5
    json.dumps(result.to_dict())
