"""The eval_keys of every own task at its defaults and at a few other settings, planned without a model.

    PYTHONPATH=/tmp/old python tests/identity_keys.py tests/data/identity_keys_87a62b8.json

Run with another release's code on PYTHONPATH (`git worktree add /tmp/old 87a62b8`) it writes that
release's keys; tests/unit/test_identity_keys.py computes them with today's code on the same world and
CLIP kit and compares, so a refactor of how identities are assembled cannot silently change a stored
result's key. Only APIs both releases share are used (registry.load_task, Task.plan, RunContext, build).
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

WORLD = {"images": 60, "seed": 0}   # tests/conftest.py's world_dir
CLIP_SEED = 0                       # tests/conftest.py's tiny_clip_dir

# (label, task, options set, run context settings); relevance is planned on the caption or chair plan
# of the same case's context
CASES = [
    ("caption/default", "caption", {}, {}),
    ("caption/split", "caption", {"split": "train"}, {}),
    ("caption/prompt", "caption", {"prompt": "Describe briefly."}, {}),
    ("caption/limit+gen", "caption", {}, {"limit": 5, "gen": {"max_new_tokens": 32, "seed": 3}}),
    ("chair/default", "chair", {}, {}),
    ("chair/n_images+seed", "chair", {"n_images": 7, "seed": 3}, {}),
    ("chair/tokenizer", "chair", {"tokenizer": "nltk310"}, {}),
    ("chair/max_new_tokens", "chair", {"max_new_tokens": 16}, {}),
    ("chair/prompt+limit", "chair", {"prompt": "What is here?"}, {"limit": 4}),
    ("relevance/default", "relevance", {}, {}),
    ("relevance/source=chair", "relevance", {"source": "chair"}, {}),
    ("relevance/limit", "relevance", {}, {"limit": 5}),
]


def _pinned_checksums(resources) -> dict[str, dict[str, str]]:
    """The NLTK data's checksums enter chair's identity; which punkt copy a machine finds first is not a
    setting, so the keys compared here are those of one fixed checksum."""
    return {res.rstrip("/"): {"path": "pinned", "sha256": "pinned"} for res in resources}


def compute(world: Path, clip: Path) -> dict[str, dict]:
    """{case label: {"eval_key", "identity"}} for CASES, planned on the world and CLIP checkpoint given."""
    from evalsuite.metrics import nltk_resources

    real = nltk_resources.resource_checksums
    nltk_resources.resource_checksums = _pinned_checksums
    try:
        return _compute(world, clip)
    finally:
        nltk_resources.resource_checksums = real


def _compute(world: Path, clip: Path) -> dict[str, dict]:
    from evalsuite.config import build
    from evalsuite.gen_settings import GenConfig
    from evalsuite.tasks.base import RunContext
    from evalsuite.tasks.registry import load_task

    out = {}
    for label, name, options, context in CASES:
        ctx = RunContext(ckpt="unused", data_root=Path(world), device="cpu", limit=context.get("limit"),
                         gen=GenConfig(**context.get("gen", {})))
        task = load_task(name)
        if name == "relevance":
            opts = build(task.Options, {"clip": str(clip), **options}, "identity_keys")
            src = load_task(opts.source or "caption")
            sources = {src.name: src.plan(ctx, src.Options(), {})}
        else:
            opts, sources = build(task.Options, dict(options), "identity_keys"), {}
        plan = task.plan(ctx, opts, sources)
        out[label] = {"eval_key": plan.eval_key, "identity": json.loads(json.dumps(plan.identity, default=str))}
    return out


def main() -> int:
    from evalsuite.kit.tiny import build_tiny_clip
    from evalsuite.world.build import build_world

    with tempfile.TemporaryDirectory() as tmp:
        world = build_world(Path(tmp) / "w", **WORLD)
        clip = build_tiny_clip(Path(tmp) / "tiny-clip", seed=CLIP_SEED)
        keys = compute(world, clip)
    # a file, not stdout: a library may print a warning line on stdout
    Path(sys.argv[1]).write_text(json.dumps(keys, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
