"""Stored results keep their keys: every own task's eval_key at its defaults and at a few other settings,
computed with today's code, equals the key release 87a62b8 computed for the same settings
(tests/data/identity_keys_87a62b8.json, written by tests/identity_keys.py with that release on
PYTHONPATH). A field marked `identity=False` (a speed or scheduling setting, a bootstrap count) keeps
the key when changed; a setting that changes the numbers changes it."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.identity_keys import compute

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "identity_keys_87a62b8.json"


def test_every_own_task_keeps_the_keys_of_release_87a62b8(world_dir, tiny_clip_dir):
    want = json.loads(REFERENCE.read_text(encoding="utf-8"))
    got = compute(world_dir, tiny_clip_dir)
    assert sorted(got) == sorted(want)
    for label in want:
        assert got[label]["identity"] == want[label]["identity"], label
        assert got[label]["eval_key"] == want[label]["eval_key"], label


def _plan(name: str, world, clip, batch_size: int = 8, **options):
    from evalsuite.config import build
    from evalsuite.tasks.base import RunContext
    from evalsuite.tasks.registry import load_task

    ctx = RunContext(ckpt="unused", data_root=Path(world), device="cpu", limit=6, batch_size=batch_size)
    task = load_task(name)
    if name == "relevance":
        options = {"clip": str(clip), **options}
    opts = build(task.Options, options, "test")
    sources = {}
    for src in task.requires(opts, [name]):
        sources[src] = load_task(src).plan(ctx, load_task(src).Options(), {})
    return task.plan(ctx, opts, sources)


# per task: the fields marked identity=False with another value, and a setting that changes numbers
SPEED = {
    "chair": ({"n_boot": 10, "cache_dir": "{tmp}/gt"}, {"n_images": 5}),
    "relevance": ({"batch_size": 3}, {"source": "chair"}),
    "caption": ({}, {"prompt": "Name the objects."}),
}


@pytest.mark.parametrize("name", sorted(SPEED))
def test_speed_settings_keep_the_key_a_real_setting_changes_it(name, world_dir, tiny_clip_dir, tmp_path):
    from evalsuite.tasks.registry import load_task

    speed, real = SPEED[name]
    speed = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in speed.items()}
    off = {f.name for f in dataclasses.fields(load_task(name).Options) if not f.metadata.get("identity", True)}
    # every speed setting this test changes is marked, and is one of the task's fields
    assert set(speed) <= off
    base = _plan(name, world_dir, tiny_clip_dir)
    assert _plan(name, world_dir, tiny_clip_dir, **speed).eval_key == base.eval_key
    assert _plan(name, world_dir, tiny_clip_dir, batch_size=3).eval_key == base.eval_key   # the run's batch
    assert _plan(name, world_dir, tiny_clip_dir, **real).eval_key != base.eval_key
