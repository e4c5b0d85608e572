"""`python training/train.py` with out-of-range numbers: exit 2 and one line naming the flag and where it was set
(the preset file or "command line"), before any model loads: `--dry-run` takes the same path without needing
a checkpoint, and a model directory that is only a config.json shows nothing was loaded."""
from __future__ import annotations


import pytest

from tests.conftest import train_inprocess
from tests.reliability.helpers import one_error

PREFIX = "train.py: error: "


def _train(*argv: str, cwd=None):
    """train.py's main in this process (tests/conftest.py: train_inprocess; a subprocess each would pay
    ~10 s of imports); the real process's exit code: tests/unit/test_train_config.py."""
    return train_inprocess(*argv, cwd=cwd)


@pytest.mark.parametrize("flag, value, message", [
    ("per_device_train_batch_size", "0", "must be >= 1, got 0"),
    ("gradient_accumulation_steps", "0", "must be >= 1, got 0"),
    ("learning_rate", "-1e-5", "must be > 0, got -1e-05"),
    ("num_train_epochs", "0", "must be > 0 when max_steps is -1, got 0.0"),
    ("max_steps", "0", "must be -1 (train num_train_epochs) or > 0, got 0"),
    ("logging_steps", "0", "must be > 0 with logging_strategy steps, got 0.0"),
    ("weight_decay", "-1", "must be >= 0, got -1.0"),
    ("ipo_logps", "mean", "has no effect with loss_type sigmoid; pass --loss_type ipo or drop ipo_logps"),
])
def test_bad_number_on_the_command_line(flag, value, message):
    res = _train("--method", "dpo", "--dry-run", f"--{flag}", value)
    assert one_error(res, prefix=PREFIX) == f"{PREFIX}command line: {flag}: {message}"


def test_bad_number_in_a_preset_names_the_file(tmp_path):
    """The same check on a real run: the preset is named, and the checkpoint (a bare config.json) is never read."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "d.json").write_text("[]")
    preset = tmp_path / "bad.yaml"
    preset.write_text("method: dpo\nper_device_eval_batch_size: 0\n")
    res = _train("--config", str(preset), "--model_name_or_path", str(tmp_path / "m"), "--data_path",
                 str(tmp_path / "d.json"), "--output_dir", str(tmp_path / "o"))
    assert one_error(res, prefix=PREFIX) == f"{PREFIX}{preset}: per_device_eval_batch_size: must be >= 1, got 0"
    assert not (tmp_path / "o").exists()
