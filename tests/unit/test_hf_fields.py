"""training/hf_fields.py (the TrainingArguments fields, committed) lets a training config be checked without
importing a model library; transformers' own TrainingArguments checks run when training starts, still one
line and exit 2 before any model loads."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO, train_inprocess
from tests.reliability.helpers import one_error

PREFIX = "train.py: error: "
MODEL_LIBS = ("torch", "transformers", "peft", "trl", "accelerate")


def test_committed_fields_match_the_installed_transformers():
    """A transformers upgrade that adds, drops, retypes or re-defaults a field fails here (one that changes
    only the version passes); regenerate with `python -m training.trainers.hf_schema > training/hf_fields.py`."""
    import transformers

    from training.hf_fields import TRANSFORMERS_VERSION
    from training.trainers.hf_schema import render

    committed = (REPO / "training" / "hf_fields.py").read_text().replace(TRANSFORMERS_VERSION, "<version>")
    assert committed == render().replace(transformers.__version__, "<version>")


def test_every_training_arguments_field_is_a_train_config_field():
    import dataclasses

    from transformers import TrainingArguments

    from training.config import TrainConfig

    ours = {f.name for f in dataclasses.fields(TrainConfig)}
    assert {f.name for f in dataclasses.fields(TrainingArguments) if f.init} <= ours


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}, check=False)


def test_dry_run_of_every_method_imports_no_model_library():
    """The csr and sft/dpo presets are validated (keys, types, values) and printed with none of them loaded."""
    code = (
        "import sys, contextlib, io\n"
        "from training.train import main\n"
        "for preset in ('configs/csr.yaml', 'configs/train/tiny_cpu.yaml'):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main(['--config', preset, '--dry-run']) == 0, preset\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {MODEL_LIBS!r}))\n")
    res = _python(code)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "[]"


def test_a_bad_value_is_refused_at_load_without_a_model_library():
    code = ("import sys\nfrom training.train import main\n"
            "rc = main(['--config', 'configs/csr.yaml', '--dry-run', 'train.save_strategy=sometimes'])\n"
            f"print(rc, sorted(m for m in sys.modules if m.split('.')[0] in {MODEL_LIBS!r}))\n")
    res = _python(code)
    assert res.stdout.strip().splitlines()[-1] == "2 []", res.stderr[-2000:]
    assert ("csr.train: save_strategy: 'sometimes' is not one of 'no', 'steps', 'epoch', 'best'"
            in res.stderr), res.stderr[-2000:]


def test_training_arguments_own_check_is_one_line_before_the_model_loads(tmp_path):
    """A combination only TrainingArguments refuses (best-model loading with mismatched strategies): a real
    run stops with one line naming the preset, before the checkpoint (a bare config.json) is read. In this process
    (conftest.train_inprocess, as the other one-line-error tests; train.py's real exit code: test_train_config)."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "d.json").write_text("[]")
    preset = tmp_path / "p.yaml"
    preset.write_text("method: dpo\nload_best_model_at_end: true\neval_strategy: steps\nsave_strategy: epoch\n")
    res = train_inprocess("--config", str(preset), "--model_name_or_path", str(tmp_path / "m"),
                          "--data_path", str(tmp_path / "d.json"), "--output_dir", str(tmp_path / "o"))
    line = one_error(res, prefix=PREFIX)
    assert line.startswith(f"{PREFIX}{preset}: TrainingArguments: ") and "load_best_model_at_end" in line, line
    assert not (tmp_path / "o").exists()


def test_csr_train_section_meets_training_arguments_before_the_loop_starts(tmp_path):
    """The CSR preset's `train:` is checked against hf_fields when loaded; TrainingArguments' own check of it
    runs in check_ready (train.py, before the loop loads any model), one line naming csr.train."""
    import pytest

    from evalsuite.errors import UserError
    from training.csr.config import CSRConfig

    for d in ("m", "i", "c"):
        (tmp_path / d).mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "c" / "config.json").write_text("{}")
    (tmp_path / "p.json").write_text("[]")
    cfg = CSRConfig.from_dict({"model": str(tmp_path / "m"), "prompts": str(tmp_path / "p.json"),
                               "image_root": str(tmp_path / "i"), "clip": str(tmp_path / "c"),
                               "output_dir": str(tmp_path / "runs"),
                               "train": {"load_best_model_at_end": True, "eval_strategy": "steps",
                                         "save_strategy": "epoch"}})
    with pytest.raises(UserError, match=r"^csr\.train: TrainingArguments: .*load_best_model_at_end"):
        cfg.check_ready()
