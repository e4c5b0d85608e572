"""What train.py prints after training (training/trainers/common.py `finish_training`'s result) is what the
run wrote: the merged checkpoint, or with `save_merged false` the adapter dir (OUTPUT_DIR/model without one), never
the merged path nothing was written to."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest


class _Accelerator:
    is_main_process = True

    def unwrap_model(self, model):
        return model

    def wait_for_everyone(self):
        pass


class _Trainer:
    """The parts of a transformers Trainer finish_training uses; save_model writes as the Trainer's does."""

    def __init__(self, model):
        self.model, self.accelerator = model, _Accelerator()
        self.callback_handler = SimpleNamespace(callbacks=[])

    def save_model(self, path: str):
        if hasattr(self.model, "save_pretrained"):
            self.model.save_pretrained(path)
        else:  # a plain module: what the Trainer writes for one (safetensors)
            from safetensors.torch import save_file

            Path(path).mkdir(parents=True, exist_ok=True)
            save_file(self.model.state_dict(), str(Path(path) / "model.safetensors"))


def _lora_model():
    import torch
    from peft import LoraConfig, get_peft_model

    base = torch.nn.Sequential()
    base.add_module("proj", torch.nn.Linear(4, 4))
    return get_peft_model(base, LoraConfig(r=2, target_modules=["proj"]))


def _cfg(out: Path, save_merged: bool):
    return SimpleNamespace(output_dir=str(out), save_merged=save_merged, merged_path=out / "merged", iteration=0,
                           parent=None, model_name_or_path="m", resolved=dict, merge_dtype="auto",
                           trust_remote_code=False, lora_merge="all")


def test_without_the_merge_the_result_is_the_adapter_written(tmp_path):
    from training.trainers.common import finish_training

    out = finish_training(_Trainer(_lora_model()), _cfg(tmp_path, False), None, {}, method="dpo")
    assert out == tmp_path / "adapter" and (out / "adapter_config.json").is_file()
    assert not (tmp_path / "merged").exists()


def test_without_the_merge_or_an_adapter_the_full_weights_are_saved(tmp_path):
    """A full fine-tune under save_merged false keeps its final weights (before, only checkpoint-N folders,
    none at all under save_strategy no), with the processor, in OUTPUT_DIR/model."""
    import torch

    from training.trainers.common import finish_training

    saved = []
    processor = SimpleNamespace(save_pretrained=lambda p: saved.append(p))
    out = finish_training(_Trainer(torch.nn.Linear(4, 4)), _cfg(tmp_path, False), processor, {}, method="sft")
    assert out == tmp_path / "model" and (out / "model.safetensors").is_file() and saved == [str(out)]
    assert not (tmp_path / "merged").exists() and not (tmp_path / "adapter").exists()


def test_with_the_merge_the_result_is_the_merged_checkpoint(tmp_path, monkeypatch):
    import training.checkpoint

    from training.trainers.common import finish_training

    written = []
    monkeypatch.setattr(training.checkpoint, "save_checkpoint", lambda model, processor, out, **kw: written.append(out))
    out = finish_training(_Trainer(_lora_model()), _cfg(tmp_path, True), None, {}, method="dpo")
    assert out == tmp_path / "merged" and written == [out]
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()


@pytest.mark.parametrize("save_merged", ["true", "false"])
def test_train_py_prints_that_result(tmp_path, monkeypatch, save_merged):
    """train.py's stdout is run()'s result, the dir finish_training returned (training and the merge itself
    replaced here: they have their own tests)."""
    import training.checkpoint
    import training.trainers.dpo
    from tests.conftest import train_inprocess
    from training.config import TrainConfig
    from training.trainers.common import finish_training

    monkeypatch.setattr(TrainConfig, "check_ready", lambda self: None)
    monkeypatch.setattr(training.checkpoint, "save_checkpoint",
                        lambda model, processor, out, **kw: Path(out).mkdir(parents=True))
    monkeypatch.setattr(training.trainers.dpo, "run_dpo",
                        lambda cfg: finish_training(_Trainer(_lora_model()), cfg, None, {}, method="dpo"))
    res = train_inprocess("--method", "dpo", "--output_dir", str(tmp_path / "o"), "--model_name_or_path", "m",
                          "--data_path", "d.json", "--save_merged", save_merged, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    want = tmp_path / "o" / ("merged" if save_merged == "true" else "adapter")
    assert res.stdout.strip() == str(want) and want.is_dir()
