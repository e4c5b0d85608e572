"""Resuming a training gives the training that was never interrupted (torchtune's resume check): a LoRA
DPO run of 4 steps against the same run stopped after step 2 (checkpoint-2 saved) and resumed with
`--resume_from_checkpoint true`: steps 3 and 4 log the same losses and learning rates, and the final
adapter weights are equal. A linear schedule makes the learning rate depend on the restored step."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.train import main as train_main

REPO = Path(__file__).resolve().parents[2]
TINY_YAML = str(REPO / "configs" / "train" / "tiny_cpu.yaml")


@pytest.fixture(scope="module")
def pairs(world_dir, tmp_path_factory) -> Path:
    """8 pairs: chosen = an image's first caption, rejected = the next image's."""
    caps = json.loads((world_dir / "annotations" / "captions_train.json").read_text())
    files = {im["id"]: f"images/train/{im['file_name']}" for im in caps["images"]}
    first: dict = {}
    for a in caps["annotations"]:
        first.setdefault(a["image_id"], a["caption"])
    items = [(files[i], c) for i, c in sorted(first.items())][:8]
    path = tmp_path_factory.mktemp("resume") / "pairs.json"
    path.write_text(json.dumps([{"image": img, "prompt": "describe the image.", "chosen": cap,
                                 "rejected": items[(k + 1) % len(items)][1]} for k, (img, cap) in enumerate(items)]))
    return path


def _args(tiny_vlm_dir, world_dir, pairs, out, *extra):
    return ["--config", TINY_YAML, "--model_name_or_path", str(tiny_vlm_dir), "--data_path", str(pairs),
            "--image_root", str(world_dir), "--output_dir", str(out), "--max_steps", "4",
            "--lr_scheduler_type", "linear", "--save_strategy", "steps", "--save_steps", "2", *extra]


def _steps(out: Path) -> dict[int, dict]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "loss" in r}


def _adapter(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "adapter" / "adapter_model.safetensors"))


def test_resumed_training_equals_the_uninterrupted_one(tiny_vlm_dir, world_dir, pairs, tmp_path, monkeypatch):
    from transformers import TrainerCallback

    from training.trainers import dpo

    full, cut = tmp_path / "full", tmp_path / "cut"
    assert train_main(_args(tiny_vlm_dir, world_dir, pairs, full)) == 0

    class StopAfter2(TrainerCallback):   # the interruption: training ends after step 2 is saved
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                control.should_training_stop = True
            return control

    build = dpo.build_dpo_trainer

    def stopping(*a, **kw):
        trainer = build(*a, **kw)
        trainer.add_callback(StopAfter2())
        return trainer

    monkeypatch.setattr(dpo, "build_dpo_trainer", stopping)
    assert train_main(_args(tiny_vlm_dir, world_dir, pairs, cut)) == 0
    assert sorted(_steps(cut)) == [1, 2] and (cut / "checkpoint-2").is_dir()
    monkeypatch.setattr(dpo, "build_dpo_trainer", build)
    assert train_main(_args(tiny_vlm_dir, world_dir, pairs, cut, "--resume_from_checkpoint", "true")) == 0

    a, b = _steps(full), _steps(cut)
    assert sorted(a) == [1, 2, 3, 4] and sorted(b) == [3, 4]
    for step in (3, 4):
        assert b[step]["loss"] == pytest.approx(a[step]["loss"], abs=1e-6)
        assert b[step]["learning_rate"] == pytest.approx(a[step]["learning_rate"], abs=1e-12)
    assert a[3]["learning_rate"] != a[1]["learning_rate"]   # the schedule moved: the step was restored
    wa, wb = _adapter(full), _adapter(cut)
    assert wa.keys() == wb.keys() and wa
    for name in wa:
        assert (wa[name] - wb[name]).abs().max().item() <= 1e-6, name
    assert any((wa[n] != 0).any() for n in wa if "lora_B" in n)   # the adapter did train
