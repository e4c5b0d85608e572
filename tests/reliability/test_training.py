"""Training-side cases: safetensors only (a pickle can run code when loaded), parents recorded absolute, and presets that
run without transformers' `gradient_checkpointing` FutureWarning."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import warnings

import pytest
import yaml

from tests.conftest import REPO, train_inprocess
from tests.reliability.helpers import one_error, snapshot

CONFIGS = sorted((REPO / "configs").rglob("*.yaml"))


def _train(*argv: str):
    """train.py's main in this process (tests/conftest.py: train_inprocess; a subprocess each would pay
    ~10 s of imports); the real process's exit code: tests/unit/test_train_config.py."""
    return train_inprocess(*argv)


def test_pickle_only_checkpoint_is_refused_before_loading(tiny_vlm_dir, world_dir, tmp_path):
    """A checkpoint whose weights are a (malicious) pytorch_model.bin: one line, nothing unpickled."""
    ck = tmp_path / "binck"
    shutil.copytree(tiny_vlm_dir, ck)
    for f in ck.glob("*.safetensors"):
        f.unlink()
    marker = tmp_path / "PWNED"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (ck / "pytorch_model.bin").write_bytes(pickle.dumps(Evil()))
    img = min((world_dir / "images" / "train").glob("*.png"))
    data = tmp_path / "pairs.json"
    data.write_text(json.dumps([{"image": img.name, "prompt": "q", "chosen": "a dog", "rejected": "a cat"}] * 2))
    before = snapshot(ck)
    res = _train("--config", str(REPO / "configs" / "train" / "tiny_cpu.yaml"), "--model_name_or_path", str(ck),
                 "--image_root", str(img.parent), "--data_path", str(data), "--output_dir", str(tmp_path / "o"))
    line = one_error(res, prefix="train.py: error: ")
    assert line.startswith(f"train.py: error: model_name_or_path: {ck}: only pickle weights")
    assert "safetensors only" in line and not marker.exists() and snapshot(ck) == before


def test_no_preset_uses_the_deprecated_checkpointing_name():
    bad = [str(p.relative_to(REPO)) for p in CONFIGS if "gradient_checkpointing" in p.read_text()]
    assert bad == []


def _cpu_train_mappings():
    """(name, TrainConfig mapping) of every CPU preset: the flat train YAMLs and the nested sections."""
    out = []
    for p in CONFIGS:
        doc = yaml.safe_load(p.read_text()) or {}
        for name, section in [(p.name, doc), (f"{p.name}:sft", doc.get("sft")),
                              (f"{p.name}:train", doc.get("train")),
                              (f"{p.name}:csr.train", (doc.get("csr") or {}).get("train"))]:
            if isinstance(section, dict) and section.get("use_cpu") and "activation_checkpointing" in section:
                out.append(pytest.param(name, section, id=name))
    return out


@pytest.mark.parametrize("name, mapping", _cpu_train_mappings())
def test_preset_config_builds_without_future_warning(name, mapping, tiny_vlm_dir, tmp_path):
    """The preset's mapping -> TrainConfig -> trainer kwargs -> TRL DPOConfig/SFTConfig, warnings as errors."""
    from trl import DPOConfig, SFTConfig

    from training.config import load_config
    from training.trainers.common import trainer_args

    data = tmp_path / "d.json"
    data.write_text("[]")
    sft = name.endswith(":sft")
    args = {k: v for k, v in mapping.items() if k not in ("method", "config")}
    args.update(model_name_or_path=str(tiny_vlm_dir), data_path=str(data), output_dir=str(tmp_path / "o"),
                method="sft" if sft else "dpo", **({"dataset_name": "vlquery_json"} if sft else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        cfg = load_config(args)
        kw = trainer_args(cfg)
        targs = (SFTConfig if sft else DPOConfig)(**kw)
    assert kw.get("gradient_checkpointing") is None
    assert targs.activation_checkpointing is bool(mapping["activation_checkpointing"])
    assert targs.gradient_checkpointing is targs.activation_checkpointing   # TRL reads the old name


def test_trainer_args_map_the_old_name():
    """A config that still says gradient_checkpointing (TRL's default is on) ends up as the new name."""
    from training.trainers.common import trainer_args

    class Cfg:
        use_lora = False

        def __init__(self, given):
            self.given = given

        def trainer_kwargs(self):
            return dict(self.given)

    for given, on in (({"gradient_checkpointing": True}, True), ({}, False),      # off unless asked
                      ({"activation_checkpointing": True}, True)):
        kw = trainer_args(Cfg(given))
        assert kw["activation_checkpointing"] is on and kw["gradient_checkpointing"] is None


def test_manifest_parent_is_recorded_absolute(tmp_path, monkeypatch):
    from evalsuite.manifest import read_manifest, write_manifest

    (tmp_path / "CK").mkdir()
    (tmp_path / "child").mkdir()
    monkeypatch.chdir(tmp_path)
    write_manifest(tmp_path / "child", iteration=1, parent="CK", method="dpo")
    assert read_manifest(tmp_path / "child")["parent"] == str((tmp_path / "CK").resolve())
    write_manifest(tmp_path / "child", iteration=1, parent="llava-hf/llava-1.5-7b-hf", method="dpo")
    assert read_manifest(tmp_path / "child")["parent"] == "llava-hf/llava-1.5-7b-hf"   # not a local path
