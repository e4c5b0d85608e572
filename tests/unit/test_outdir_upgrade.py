"""A run directory written before the prompt settings moved into `inputs:` resumes with the same settings
(evalsuite/outdir.py `upgraded_config`); other settings are still refused."""
from __future__ import annotations

import json

import pytest

from evalsuite.config import to_plain
from evalsuite.errors import UserError
from evalsuite.outdir import OutputDir
from evalsuite.run_config import load_eval_config


def _config(*argv) -> dict:
    cfg, _ = load_eval_config(["--ckpt", "CK", "--data-root", "W", "--tasks", "caption", *argv])
    return to_plain(cfg)


def _old_run(tmp_path, config: dict) -> OutputDir:
    old = dict(config)
    for key, value in old.pop("inputs").items():  # the previous release's flat spelling
        old[key] = value
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r1", "ckpt_hash": "h", "config": old}))
    return OutputDir(tmp_path)


def test_a_run_json_with_the_flat_prompt_keys_resumes(tmp_path):
    cfg = _config("--system-prompt", "Be brief.", "--image-aspect", "pad")
    assert "system_prompt" in cfg["inputs"]
    assert _old_run(tmp_path, cfg).existing_run(cfg, "h") == "r1"


def test_other_prompt_settings_are_still_another_configuration(tmp_path):
    out = _old_run(tmp_path, _config("--system-prompt", "Be brief."))
    with pytest.raises(UserError, match="inputs.system_prompt differ"):
        out.existing_run(_config("--system-prompt", "Be long."), "h")
