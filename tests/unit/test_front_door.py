"""The front door is generated from the config schema (evalsuite/config.py): only true/false fields may be
given as a bare flag, every field carries help that every --help shows, choice fields are Literals the
loader checks."""
from __future__ import annotations

import typing

import pytest

from evalsuite.config import config_fields


def _config_classes():
    from evalsuite.run_config import EvalConfig
    from training.csr.config import CSRConfig
    from training.demo import DemoConfig

    return [EvalConfig, CSRConfig, DemoConfig]


@pytest.mark.parametrize("argv", [
    ["--prompt", "--world"],                 # a convenience flag fanning out to caption/chair.prompt
    ["--world", "--system-prompt"],          # a top-level string field, last on the line
    ["--world", "--limit", "--rerun"],       # an int field
])
def test_bare_flag_of_a_non_boolean_field_is_one_line_exit_2(argv, tmp_path, capsys):
    from evalsuite.cli import main

    code = main(["run", "--ckpt", str(tmp_path), "--tasks", "chair", *argv, "--dry-run"])
    err = capsys.readouterr().err.strip()
    flag = next(a for a in argv if a not in ("--world", "--rerun"))
    assert code == 2 and len(err.splitlines()) == 1
    assert flag in err or flag.lstrip("-").replace("-", "_") in err
    assert "needs a value" in err


def test_bare_boolean_flags_are_true(tmp_path, capsys):
    from evalsuite.run_config import load_eval_config

    cfg, own = load_eval_config(["--ckpt", str(tmp_path), "--tasks", "chair", "--world", "--rerun", "--dry-run"])
    assert cfg.world is True and cfg.rerun is True and own == {"dry_run": True}


def test_bare_flag_is_true_wherever_the_field_takes_true_false():
    """`--resume_from_checkpoint` alone (str | bool | None: VL-RLHF's bool flag) is True; a str field is not."""
    from evalsuite.config import Bare, _Mismatch, coerce

    assert coerce(Bare(), bool, "k") is True and coerce(Bare(), str | bool | None, "k") is True
    with pytest.raises(_Mismatch, match="needs a value"):
        coerce(Bare(), str | None, "k")


def test_bare_entry_point_option_is_refused():
    from evalsuite.config import split_args
    from evalsuite.errors import UserError

    with pytest.raises(UserError, match="^--config: needs a value"):
        split_args(["--config", "--dry-run"], ("config", "dry_run!"))


@pytest.mark.parametrize("argv", [["--config", "configs/train/tiny_cpu.yaml", "--output_dir"],
                                  ["--config", "configs/csr.yaml", "--inputs.system_prompt"]])
def test_train_py_bare_string_flag_is_one_line_exit_2(argv, capsys):
    from training.train import main

    assert main([*argv, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{argv[-1].lstrip('-')}: needs a value" in err


def test_every_config_field_has_help():
    missing = [f"{cls.__name__}.{key}" for cls in _config_classes() for key, f, _ in config_fields(cls)
               if not (f.metadata or {}).get("help")]
    assert missing == []


def test_every_trainer_field_has_help():
    """TrainConfig: evalsuite's own fields and the transformers TrainingArguments ones it inherits."""
    import dataclasses

    from training.config import TrainConfig

    assert [f.name for f in dataclasses.fields(TrainConfig) if f.init and not (f.metadata or {}).get("help")] == []


def test_train_py_csr_help_shows_every_field_with_its_help(capsys):
    from training.csr.config import CSRConfig
    from training.train import main

    assert main(["--method", "csr", "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for key, f, _ in config_fields(CSRConfig):
        assert any(line.split()[:1] in ([key], [key + ":"]) and f.metadata["help"] in line for line in lines), key


def test_train_py_dpo_help_shows_every_field_with_help(capsys):
    """evalsuite's trainer fields and every inherited TrainingArguments field, each with help text
    (a library paragraph shortened to its first sentence)."""
    from training.config import TrainConfig
    from training.train import main

    assert main(["--method", "dpo", "--help"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    for key, f, sub in config_fields(TrainConfig):   # the inputs section as `inputs:`, then inputs.*
        text = " ".join(f.metadata["help"].split())
        shown = key + ":" if sub is not None else key
        assert shown in rows and text[:20] in rows[shown], key   # long ones are shortened


def test_choice_fields_are_literals_checked_by_the_loader():
    """chair.variant and the trainer's loss_type / lora_bias / dataset_name list the names their code knows."""
    from evalsuite.config import load
    from evalsuite.errors import UserError
    from evalsuite.metrics.chair import VARIANTS
    from evalsuite.tasks.chair import ChairOptions

    hints = typing.get_type_hints(ChairOptions)
    assert typing.get_args(hints["variant"]) == tuple(VARIANTS)
    with pytest.raises(UserError, match=r"variant: 'nosuch' is not one of 'original', 'opera', 'opera_lemma'"):
        load(ChairOptions, overrides=[("variant", "nosuch")])


def test_train_choice_literals_match_the_code():
    from training.config import TrainConfig
    from training.config_checks import PAIR_DATASETS, SFT_DATASETS
    from training.losses import LOSSES

    hints = typing.get_type_hints(TrainConfig)
    assert typing.get_args(hints["loss_type"]) == tuple(LOSSES)
    datasets = [a for a in typing.get_args(hints["dataset_name"]) if a is not type(None)]
    assert set(typing.get_args(datasets[0])) == {*SFT_DATASETS, *PAIR_DATASETS}
    assert typing.get_args(hints["lora_bias"]) == ("none", "all", "lora_only")
