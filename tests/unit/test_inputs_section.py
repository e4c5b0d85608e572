"""One `inputs:` section (evalsuite.models.inputs.InputConfig) in the eval, training and CSR configs:
declared once, handed on as the object, the same result identities as the flat fields it replaces, and
the old flat spellings either kept as documented flags (`evalsuite run --system-prompt`) or refused in
one line naming the new spelling."""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from evalsuite.errors import UserError
from evalsuite.identity import inputs_identity
from evalsuite.models.inputs import InputConfig

REPO = Path(__file__).resolve().parents[2]
CSR = REPO / "configs" / "csr.yaml"
OLD = ("system_prompt", "chat_template", "image_aspect")


def _classes():
    from evalsuite.run_config import EvalConfig
    from training.config import TrainConfig
    from training.csr.config import CSRConfig

    return [EvalConfig, TrainConfig, CSRConfig]


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_every_config_declares_the_settings_once_as_the_inputs_section(cls):
    from evalsuite.config import help_lines

    names = {f.name for f in dataclasses.fields(cls)}
    assert "inputs" in names and not names & set(OLD)
    assert typing.get_type_hints(cls)["inputs"] is InputConfig
    text = "\n".join(help_lines(cls))   # what --help prints: every inputs field with its help
    for name in OLD:
        line = next(ln for ln in text.splitlines() if ln.split()[0] == f"inputs.{name}")
        assert InputConfig.__dataclass_fields__[name].metadata["help"] in line


def test_eval_flags_are_the_documented_spelling_of_the_inputs_fields(tmp_path):
    from evalsuite.run_config import load_eval_config

    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    base = ["--ckpt", str(tmp_path), "--tasks", "caption", "--world", "true"]
    flags, _ = load_eval_config([*base, "--system-prompt", "Be brief.", "--image-aspect", "pad",
                                 "--chat-template", str(template)])
    dotted, _ = load_eval_config([*base, "inputs.system_prompt=Be brief.", "inputs.image_aspect=pad",
                                  f"inputs.chat_template={template}"])
    assert flags.inputs == dotted.inputs == InputConfig("Be brief.", str(template), "pad")
    with pytest.raises(UserError, match="inputs.image_aspect: 'stretch' is not one of 'crop', 'pad'"):
        load_eval_config([*base, "--image-aspect", "stretch"])


def test_result_identity_is_that_of_the_flat_fields(tmp_path):
    """The identity the flat fields gave (EvalConfig.inputs() dict -> InputConfig -> identity()): {} for the
    defaults (default runs keep their keys), non-defaults by value, a template file by its content."""
    from evalsuite.files import sha256_file
    from evalsuite.run_config import load_eval_config
    from evalsuite.tasks.base import RunContext

    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    base = ["--ckpt", str(tmp_path), "--tasks", "caption", "--world", "true"]
    default, _ = load_eval_config(base)
    assert inputs_identity(default.inputs) == {} and default.inputs.cache_suffix() == ""
    cfg, _ = load_eval_config([*base, "--system-prompt", "Be brief.", "--image-aspect", "pad"])
    assert inputs_identity(cfg.inputs) == {"system_prompt": "Be brief.", "image_aspect": "pad"}
    tcfg, _ = load_eval_config([*base, "--chat-template", str(template)])
    assert inputs_identity(tcfg.inputs) == {"chat_template_sha256": sha256_file(template)}
    # the run context and its model loader hold the config's object itself (no dict in between)
    ctx = RunContext(ckpt=str(tmp_path), data_root=None, inputs=cfg.inputs)
    assert ctx.inputs is cfg.inputs and ctx.loader.inputs is cfg.inputs


@pytest.mark.parametrize("name", OLD)
def test_old_flat_keys_fail_naming_the_new_spelling(name, tmp_path):
    from evalsuite.run_config import load_eval_config
    from training.config import build_train_config
    from training.csr.config import load_config

    value = "pad" if name == "image_aspect" else "x"
    want = f"{name}: renamed inputs.{name}"
    preset = tmp_path / "old.yaml"
    preset.write_text(f"{name}: {value}\n")
    with pytest.raises(UserError, match=f"old.yaml: {want}"):
        load_eval_config(["--config", str(preset), "--ckpt", str(tmp_path), "--tasks", "caption", "--world"])
    with pytest.raises(UserError, match=want):
        build_train_config({"method": "dpo", "output_dir": str(tmp_path), name: value}, "t", portable=True)
    with pytest.raises(UserError, match=want):
        load_config(CSR, [f"{name}={value}"])


def test_train_py_old_flag_is_one_line_exit_2(capsys):
    from training.train import main

    assert main(["--config", "configs/train/tiny_cpu.yaml", "--system_prompt", "Be brief.", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "system_prompt: renamed inputs.system_prompt" in err


def test_csr_hands_the_object_to_every_stage_and_keeps_its_per_stage_image_aspect(tmp_path):
    """configs/csr.yaml: the evaluation gets the top-level inputs object, generation crops (tree.image_aspect),
    DPO pads (train.image_aspect, kept in the `train:` mapping that is the csr_train results' identity)."""
    from training.csr.config import load_config

    cfg = load_config(CSR, [f"model={tmp_path}", "eval.tasks=[pope]", f"eval.data_root={tmp_path}"])
    assert cfg.inputs.image_aspect == "pad" and cfg.inputs.system_prompt.startswith("A chat between")
    assert cfg.eval_config(tmp_path, "base", tmp_path / "e").inputs is cfg.inputs
    assert cfg.generation_input_config() == dataclasses.replace(cfg.inputs, image_aspect="crop")
    train = cfg.train_config(tmp_path, 1, tmp_path / "iter_1", portable=True)
    assert train.inputs == dataclasses.replace(cfg.inputs, image_aspect="pad")
    assert cfg.to_dict()["train"]["image_aspect"] == "pad"   # the csr_train identity, as before
    same = load_config(CSR, [f"model={tmp_path}", "inputs.image_aspect=crop", "tree.image_aspect=null",
                             "train.image_aspect=crop"])
    assert same.train_config(tmp_path, 1, tmp_path / "iter_1", portable=True).inputs is same.inputs
    with pytest.raises(UserError, match="train: system_prompt are set by the loop"):
        load_config(CSR, ["train.system_prompt=x"])
    with pytest.raises(UserError, match="train.image_aspect: 'stretch' is not one of crop, pad"):
        load_config(CSR, ["train.image_aspect=stretch"])
    with pytest.raises(UserError, match="eval.inputs: is set by the loop"):
        load_config(CSR, ["eval.tasks=[pope]", f"eval.data_root={tmp_path}", "eval.inputs.image_aspect=pad"])
