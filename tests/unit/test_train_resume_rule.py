"""Which checkpoint-N a run continues from (training/resume.py), one rule for `--resume_from_checkpoint`
and the CSR loop (training/signals.py `resumable_checkpoint`): complete = trainer_state.json + weights +
optimizer + scheduler state; a half-written latest folder is skipped with one log line, a weights-only one
(`save_only_model`: transformers would resume it with a fresh optimizer and LR schedule, silently) is
refused; a train_run.json written before the prompt settings moved into `inputs:` is the same run."""
from __future__ import annotations

import json
import logging

import pytest

from evalsuite.errors import UserError
from training.config import load_config, resume_checkpoint
from training.outdir import MARKER, _fingerprint, owned_output_dir
from training.resume import WEIGHTS_ONLY, checkpoint_problem, latest_checkpoint
from training.signals import resumable_checkpoint


def _ckpt(out, step, *names):
    p = out / f"checkpoint-{step}"
    p.mkdir(parents=True)
    for n in names:
        if n.endswith(".safetensors"):   # a header that reads (training/resume.py damaged_file checks it)
            (p / n).write_bytes((2).to_bytes(8, "little") + b"{}")
        else:
            (p / n).write_text("{}" if n.endswith(".json") else "x")
    return p


FULL = ("adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json")
WEIGHTS = ("adapter_model.safetensors", "trainer_state.json", "training_args.bin")


def test_what_is_complete(tmp_path):
    assert checkpoint_problem(_ckpt(tmp_path, 1, *FULL)) is None
    assert checkpoint_problem(_ckpt(tmp_path, 2, *WEIGHTS)) == WEIGHTS_ONLY
    assert checkpoint_problem(_ckpt(tmp_path, 3, "model.safetensors", "optimizer.pt")) == \
        "half-written (no trainer_state.json)"
    assert checkpoint_problem(_ckpt(tmp_path, 4, "trainer_state.json", "training_args.bin", "optimizer.pt",
                                    "scheduler.pt")) == "half-written (no model weights)"
    ds = _ckpt(tmp_path, 5, "trainer_state.json", "latest")
    assert checkpoint_problem(ds) == "half-written (no model weights)"
    (ds / "global_step5").mkdir()          # DeepSpeed: model, optimizer and scheduler state in global_stepN/
    assert checkpoint_problem(ds) is None


def test_a_half_written_latest_folder_is_skipped_with_one_line(tmp_path, caplog):
    good = _ckpt(tmp_path, 4, *FULL)
    _ckpt(tmp_path, 12, *FULL)
    (tmp_path / "checkpoint-12" / "trainer_state.json").unlink()   # killed during the save
    _ckpt(tmp_path, 9, *FULL)
    (tmp_path / "checkpoint-9" / "adapter_model.safetensors").unlink()
    (tmp_path / "checkpoint-x").mkdir()
    with caplog.at_level(logging.WARNING, "training.resume"):
        assert latest_checkpoint(tmp_path) == (good, "")
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'checkpoint-12'}: half-written (no trainer_state.json); skipped",
        f"{tmp_path / 'checkpoint-9'}: half-written (no model weights); skipped"]


def test_none_to_continue_says_why(tmp_path):
    assert latest_checkpoint(tmp_path / "absent") == (None, f"{tmp_path / 'absent'} holds no checkpoint-N directory")
    only = _ckpt(tmp_path, 3, "model.safetensors")
    assert latest_checkpoint(tmp_path) == (
        None, f"{only}: half-written (no trainer_state.json); no complete checkpoint-N in {tmp_path}")
    _ckpt(tmp_path, 1, *FULL)
    weights = _ckpt(tmp_path, 2, *WEIGHTS)   # the latest complete-looking one holds the weights only
    assert latest_checkpoint(tmp_path) == (None, f"{weights}: {WEIGHTS_ONLY} (no optimizer/scheduler state)")


def test_resume_true_refuses_weights_only_and_takes_the_latest_complete(tmp_path, paths):
    out = tmp_path / "o"
    _ckpt(out, 2, *FULL)
    weights = _ckpt(out, 4, *WEIGHTS)
    with pytest.raises(UserError) as e:   # when the config is read, before any model loads
        load_config({**paths, "resume_from_checkpoint": "true"})
    assert str(e.value) == f"resume_from_checkpoint: true, but {weights}: {WEIGHTS_ONLY} (no optimizer/scheduler state)"
    with pytest.raises(UserError, match=rf"^resume_from_checkpoint: {weights}: weights only \(save_only_model\)"):
        resume_checkpoint(load_config({**paths, "resume_from_checkpoint": str(weights)}))
    for name in ("optimizer.pt", "scheduler.pt"):
        (weights / name).write_text("x")
    _ckpt(out, 10, "adapter_model.safetensors")   # half written
    assert resume_checkpoint(load_config({**paths, "resume_from_checkpoint": "true"})) == str(weights)


def test_train_py_refuses_a_weights_only_checkpoint_with_exit_2(tmp_path, paths, capsys):
    from training.train import main

    weights = _ckpt(tmp_path / "o", 3, *WEIGHTS)
    argv = [f"--{k}={v}" for k, v in paths.items()] + ["--method", "dpo", "--resume_from_checkpoint", "true"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"train.py: error: resume_from_checkpoint: true, but {weights}: {WEIGHTS_ONLY} "
                    "(no optimizer/scheduler state)")]


def _old_marker(out, cfg):
    """train_run.json as written before `inputs:`: the prompt settings also flat at the top level."""
    old = _fingerprint(cfg)
    for key in ("system_prompt", "chat_template", "image_aspect"):
        old[key] = old["inputs"][key]
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text(json.dumps({"config": old}))


def test_a_pre_inputs_output_dir_is_the_same_run(tmp_path, paths):
    cfg = load_config({**paths, "inputs": {"system_prompt": "Be brief.", "image_aspect": "pad"}})
    out = tmp_path / "o"
    full = _ckpt(out, 5, *FULL)
    _old_marker(out, cfg)
    with owned_output_dir(cfg):   # not refused as "chat_template, image_aspect, system_prompt differ"
        pass
    _old_marker(out, cfg)
    assert resumable_checkpoint(out, cfg) == str(full)
    other = load_config({**paths, "inputs": {"system_prompt": "Be long.", "image_aspect": "pad"}})
    with pytest.raises(UserError, match=r"inputs\.system_prompt differ"), owned_output_dir(other):
        pass


def test_csr_continuation_says_why_not_in_one_line(tmp_path, paths, caplog):
    cfg = load_config(paths)
    out = tmp_path / "o"
    assert resumable_checkpoint(out, cfg) is None and not caplog.records   # nothing there: nothing to say
    full = _ckpt(out, 5, *FULL)
    (out / MARKER).write_text(json.dumps({"config": _fingerprint(cfg)}))
    assert resumable_checkpoint(out, cfg) == str(full)
    weights = _ckpt(out, 7, *WEIGHTS)
    other = load_config({**paths, "learning_rate": 0.5})
    with caplog.at_level(logging.WARNING, "training.signals"):
        assert resumable_checkpoint(out, cfg) is None
        assert resumable_checkpoint(out, other) is None
        (out / MARKER).unlink()
        assert resumable_checkpoint(out, cfg) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"{out}: not continued ({weights}: {WEIGHTS_ONLY} (no optimizer/scheduler state)): removed, training starts afresh",
        f"{out}: not continued (a run of another configuration: learning_rate differ): removed, training starts afresh",
        f"{out}: not continued (no {MARKER}): removed, training starts afresh"]


def test_a_field_the_settings_never_read_is_not_another_configuration(tmp_path, paths):
    """configs/train/llava15_7b_dpo.yaml stopped setting max_target_length, which truncation vlrlhf never
    reads (training/config_checks.py `unread`): its OUTPUT_DIR is still the same run's. Where the field is
    read (truncation per_field), the same difference is another configuration, named."""
    from training.outdir import training_artefacts

    cfg = load_config({**paths, "method": "dpo", "truncation": "vlrlhf"})
    out = tmp_path / "o"
    _ckpt(out, 5, *FULL)
    recorded = {**_fingerprint(cfg), "max_target_length": 512}
    assert recorded != _fingerprint(cfg)
    (out / MARKER).write_text(json.dumps({"config": recorded}))
    with owned_output_dir(cfg):
        pass
    (out / MARKER).write_text(json.dumps({"config": {**_fingerprint(cfg), "max_target_length": 512,
                                                      "truncation": "per_field"}}))
    per_field = load_config({**paths, "method": "dpo", "truncation": "per_field"})
    with pytest.raises(UserError, match=r"\(max_target_length differ\)"), owned_output_dir(per_field):
        pass
    # a folder named model that the Trainer did not write is the user's, not a training artefact
    (tmp_path / "u" / "model").mkdir(parents=True)
    assert training_artefacts(tmp_path / "u") == []
    (tmp_path / "u" / "model" / "training_args.bin").write_bytes(b"x")
    assert training_artefacts(tmp_path / "u") == ["model"]
