"""A resumed training equals an uninterrupted one (the torchtune-style resume check).

On the tiny kit LLaVA (DPO, and SFT with LoRA dropout), run A trains 4 steps in one go; run B trains 2 steps into its own output dir
(which saves checkpoint-2, what a killed run leaves), then a second `train.py` call with
`--resume_from_checkpoint true` trains steps 3-4. Steps 3-4 must have the same losses and the final
weights must be the same, which holds only if resuming restores the data order (mid-epoch: 8 examples
at batch 2 are 4 steps per epoch, so B resumes inside the epoch's shuffled order), the optimizer
moments, the LR scheduler's step (`constant_with_warmup` over 3 steps: the LR still rises at the
resume point, and depends on the step only, so run B's first leg may stop at max_steps 2) and, for
SFT, the RNG state (its LoRA dropout draws; TRL's DPO turns dropout off). Measured: equal to the last
bit (losses and adapter weights). Deleting checkpoint-2's scheduler.pt or optimizer.pt makes DPO's
step-4 loss and weights differ (max |diff| 0.036), deleting rng_state.pth does so for SFT (0.051):
the test catches each.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.train import main as train_main

REPO = Path(__file__).resolve().parents[2]
TINY_YAML = str(REPO / "configs" / "train" / "tiny_cpu.yaml")


def _train(tiny_vlm_dir, world_dir, pairs, out: Path, max_steps: int, *extra: str) -> None:
    argv = ["--config", TINY_YAML, "--model_name_or_path", str(tiny_vlm_dir), "--data_path", str(pairs),
            "--image_root", str(world_dir), "--output_dir", str(out), "--max_steps", str(max_steps),
            "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps", "3", "--learning_rate", "0.02",
            "--save_strategy", "steps", "--save_steps", "2", "--save_merged", "false", *extra]
    assert train_main(argv) == 0


def _losses(out: Path) -> dict[int, float]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def _adapter(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "adapter" / "adapter_model.safetensors"))


# SFT keeps LoRA dropout on (TRL's DPO turns dropout off), so its run also needs the RNG state restored
METHODS = {"dpo": [], "sft": ["--method", "sft", "--dataset_name", "vlquery_json", "--lora_dropout", "0.3"]}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_two_steps_resume_two_steps_equals_four_steps(method, tiny_vlm_dir, world_dir, pairs, tmp_path):
    import torch

    extra = METHODS[method]
    if method == "sft":
        extra = [*extra, "--data_path", str(pairs.with_name("sft.json"))]
    full, cut = tmp_path / "full", tmp_path / "cut"
    _train(tiny_vlm_dir, world_dir, pairs, full, 4, *extra)
    _train(tiny_vlm_dir, world_dir, pairs, cut, 2, *extra)
    first = _losses(cut)
    assert (cut / "checkpoint-2").is_dir()
    _train(tiny_vlm_dir, world_dir, pairs, cut, 4, *extra, "--resume_from_checkpoint", "true")

    a = _losses(full)
    assert sorted(a) == [1, 2, 3, 4]
    assert [first[s] for s in (1, 2)] == pytest.approx([a[1], a[2]], abs=1e-6)
    b = _losses(cut)
    assert [b[s] for s in (3, 4)] == pytest.approx([a[3], a[4]], abs=1e-6)
    # the steps after the resume point did train (the LR is 0 at step 1: DPO scores ln 2 at steps 1-2)
    assert a[3] != a[2] and a[4] != a[3]

    wa, wb = _adapter(full), _adapter(cut)
    assert sorted(wa) == sorted(wb) and wa
    diff = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    assert diff <= 1e-7
    # ...and they moved away from checkpoint-2's weights (the resumed steps were not no-ops)
    from safetensors.torch import load_file

    mid = load_file(str(cut / "checkpoint-2" / "adapter_model.safetensors"))
    assert any(not torch.equal(mid[k], wb[k]) for k in wb)
