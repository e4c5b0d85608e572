"""--judge / --judge-model and the judge: section of `evalsuite run` (evalsuite/run_config.py)."""
from __future__ import annotations

import pytest

from evalsuite.errors import UserError
from evalsuite.run_config import load_eval_config

BASE = ["--ckpt", "ck", "--tasks", "mmhal"]


def test_judge_url_and_model():
    cfg, _ = load_eval_config([*BASE, "--judge", "http://127.0.0.1:8000/v1", "--judge-model", "qwen"])
    assert (cfg.judge.url, cfg.judge.model) == ("http://127.0.0.1:8000/v1", "qwen")
    assert cfg.data_root is None   # mmhal brings its own data


def test_judge_dir():
    cfg, _ = load_eval_config([*BASE, "--judge", "/models/judge", "judge.max_concurrency=2"])
    assert (cfg.judge.url, cfg.judge.model, cfg.judge.max_concurrency) == (None, "/models/judge", 2)


def test_judge_from_a_preset(tmp_path):
    p = tmp_path / "eval.yaml"
    p.write_text("tasks: [mmhal]\njudge:\n  url: http://h:1/v1\n  model: m\n  temperature: 0.2\n")
    cfg, _ = load_eval_config(["--config", str(p), "--ckpt", "ck"])
    assert (cfg.judge.url, cfg.judge.model, cfg.judge.temperature) == ("http://h:1/v1", "m", 0.2)


@pytest.mark.parametrize("argv,msg", [
    (["--ckpt", "ck", "--tasks", "chair", "--world", "--judge", "/j"],
     "--judge: judge.model: no task of this run reads the judge section"),
    ([*BASE, "--judge", "/j", "--judge-model", "m"], "--judge-model: only with --judge URL"),
    ([*BASE, "--judge-model", "m", "--judge", "/j"], "--judge-model: only with --judge URL"),
    ([*BASE, "--judge"], "--judge: needs a value"),
    ([*BASE, "--judge", "http://h/v1", "judge.start_timeout_s=5"], "judge.start_timeout_s: has no effect with judge.url"),
    ([*BASE, "judge.url=ftp://h"], "judge.url: 'ftp://h' is not an http"),
    ([*BASE, "judge.max_tokens=0"], "judge.max_tokens: must be >= 1"),
    ([*BASE, "mmhal.n_boot=-1"], "mmhal.n_boot: must be >= 0"),
])
def test_refused_in_one_line(argv, msg):
    with pytest.raises(UserError) as e:
        load_eval_config(argv)
    assert msg in str(e.value) and "\n" not in str(e.value)
