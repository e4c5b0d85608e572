"""How the CSR loop sits in a run: its rank comes from the `Dist` the entry point passes in (never from the
launcher's environment), and before DPO it frees both models it holds, the generator and the CLIP judge."""
from __future__ import annotations

import json
import sys
import types
import weakref
from pathlib import Path

import pytest

from evalsuite.dist import Dist

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def cfg(tmp_path, tiny_vlm_dir, tiny_clip_dir, world_dir):
    from training.csr.config import load_config

    images = world_dir / "images" / "train"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.stem, "image": p.name, "question": "Describe the image."}) + "\n"
                               for p in sorted(images.iterdir())[:3]))
    return load_config(REPO / "configs" / "csr_tiny.yaml", [
        f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
        f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}", "iterations=1", "tree.max_depth=1"])


class _SecondOfTwo(Dist):
    """Rank 1 of 2 without a process group: its barriers only count."""

    def barrier(self) -> None:
        object.__setattr__(self, "waits", getattr(self, "waits", 0) + 1)


def test_generation_shard_follows_the_dist_passed_in_not_the_environment(cfg, monkeypatch):
    from training.csr.loop import _Models, load_prompts, stage_generate

    monkeypatch.setenv("RANK", "0")  # what a launcher would say; the loop must not look
    monkeypatch.setenv("WORLD_SIZE", "1")
    records = load_prompts(cfg.prompts)
    d = cfg.run_dir / "iter_1"
    d.mkdir(parents=True)
    dist = _SecondOfTwo(rank=1, world_size=2)
    stage_generate(cfg, _Models(cfg, dist), cfg.model, records, d)
    mine = [json.loads(x)["id"] for x in (d / "trees.rank1.jsonl").read_text().splitlines()]
    assert mine == [records[1]["id"]]  # prompts 1, 3, ... of 3
    assert json.loads((d / "generate.rank1.done").read_text()) == {"trees": 1, "world": 2}
    assert not (d / "trees.rank0.jsonl").exists() and not (d / "generate.done").exists()  # rank 0's work
    assert dist.waits == 2


def test_judge_and_generator_are_freed_during_dpo_and_loaded_again_after(cfg, monkeypatch):
    from training.csr.loop import _mark, _Models, stage_train

    models = _Models(cfg, Dist())
    judge, generator = weakref.ref(models.scorer()), weakref.ref(models.vlm(cfg.model))
    assert judge() is not None and generator() is not None
    d = cfg.run_dir / "iter_1"
    d.mkdir(parents=True)
    (d / "pairs.json").write_text("[]")
    _mark(d, "pairs", pairs=1, skipped={}, pairs_hash="0")
    alive = []

    def run_dpo(tcfg):  # stands in for training: records what is still in memory when DPO starts
        alive.append({"judge": judge() is not None, "generator": generator() is not None})
        return d / "merged"

    monkeypatch.setitem(sys.modules, "training.trainers.dpo", types.SimpleNamespace(run_dpo=run_dpo))
    assert stage_train(cfg, models, cfg.model, 1, d) == str(d / "merged")
    assert alive == [{"judge": False, "generator": False}]
    again = models.scorer()  # the next iteration's scoring loads the judge again
    assert again is not None and again is models.scorer()
