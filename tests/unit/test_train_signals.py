"""training/signals.py without a model: the handler only records the first signal (the same signal again
within REPEAT_WINDOW_S is the same request), a second one runs the handler that was there before (stop at
once), an ignored signal stays ignored, the callback asks for a save + stop at the step end (again at the
epoch end when `save_strategy: best` dropped it), a checkpoint half written when the run is stopped at
once is removed, a weights-only save says it is not resumable, and the config refuses transformers' own
SIGTERM checkpoint alongside ours. The runs themselves: tests/integration/test_train_signal.py."""
from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from evalsuite.errors import UserError
from evalsuite.interrupts import Terminated
from training.signals import (
    REPEAT_WINDOW_S,
    StopRequest,
    save_on_signal,
    save_on_signal_callback,
)


class FakeTrainer:
    def __init__(self, out):
        self.args = SimpleNamespace(should_save=True, output_dir=str(out), device="cpu")
        self.callbacks = []

    def add_callback(self, cb):
        self.callbacks.append(cb)

    def remove_callback(self, cb):
        self.callbacks.remove(cb)


def _step_end(cb, args, step):
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    cb.on_step_end(args, SimpleNamespace(global_step=step), control)
    return control


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_first_signal_is_recorded_second_runs_the_previous_handler():
    seen = []

    def previous(signum, frame):
        seen.append(signum)
        raise Terminated()

    clock = Clock()
    req = StopRequest(clock)
    req.previous[signal.SIGTERM] = previous
    req.handler(signal.SIGTERM, None)              # first: only the flag
    assert req.signum == signal.SIGTERM and not seen
    clock.now += REPEAT_WINDOW_S + 0.1
    with pytest.raises(Terminated):
        req.handler(signal.SIGTERM, None)
    assert seen == [signal.SIGTERM]
    req.previous[signal.SIGINT] = signal.SIG_DFL   # no Python handler before: the exception train.py turns into 130
    with pytest.raises(KeyboardInterrupt):
        req.handler(signal.SIGINT, None)


def test_the_same_signal_twice_within_the_window_is_one_request():
    """torchrun: Slurm's SIGTERM and the agent's forwarded copy reach a worker milliseconds apart."""
    seen = []
    clock = Clock()
    req = StopRequest(clock)
    req.previous[signal.SIGTERM] = lambda signum, frame: seen.append(signum)
    req.previous[signal.SIGINT] = lambda signum, frame: seen.append(signum)
    req.handler(signal.SIGTERM, None)
    clock.now += 0.003
    req.handler(signal.SIGTERM, None)              # the copy: still the first request
    clock.now += REPEAT_WINDOW_S - 0.1
    req.handler(signal.SIGTERM, None)              # within the window of the first
    assert req.signum == signal.SIGTERM and not seen
    with pytest.raises(KeyboardInterrupt):         # another signal is another request: stop now
        req.handler(signal.SIGINT, None)
    assert seen == [signal.SIGINT]
    clock.now += 0.2                               # past the window: a second request
    with pytest.raises(Terminated):
        req.handler(signal.SIGTERM, None)
    assert seen == [signal.SIGINT, signal.SIGTERM]


def test_the_window_with_real_signals(tmp_path):
    """Two SIGTERMs delivered back to back inside save_on_signal: recorded once, training goes on."""
    trainer = FakeTrainer(tmp_path)
    with save_on_signal(trainer, True):
        [cb] = trainer.callbacks
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
        assert cb.request.signum == signal.SIGTERM
        cb.request.signum = 0                      # leave without the exit


def test_an_ignored_signal_stays_ignored(tmp_path):
    """A background job (`cmd &` in a non-interactive shell) starts with SIGINT ignored."""
    trainer = FakeTrainer(tmp_path)
    before_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with save_on_signal(trainer, True):
            [cb] = trainer.callbacks
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == cb.request.handler
            signal.raise_signal(signal.SIGINT)
            assert cb.request.signum == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before_int)


def test_callback_saves_and_stops_only_after_a_signal():
    req = StopRequest()
    cb = save_on_signal_callback(req)
    args = SimpleNamespace(device="cpu", output_dir="/x")
    control = _step_end(cb, args, 1)
    assert not control.should_save and not control.should_training_stop
    req.signum = signal.SIGINT
    control = _step_end(cb, args, 2)
    assert control.should_save and control.should_training_stop and cb.step == 2


def _epoch_end(cb, args, step):
    control = SimpleNamespace(should_save=False, should_evaluate=True)
    cb.on_epoch_end(args, SimpleNamespace(global_step=step), control)
    return control


def test_save_dropped_by_save_strategy_best_is_asked_again_at_the_epoch_end():
    """Trainer._maybe_log_save_evaluate sets should_save = is_new_best_metric after an evaluation under
    `save_strategy: best`, so the step's save can be dropped; the epoch-end pass then saves, without
    the evaluation that would drop it again. Once saved, the epoch end asks nothing."""
    args = SimpleNamespace(device="cpu", output_dir="/x")
    cb = save_on_signal_callback(StopRequest())
    cb.request.signum = signal.SIGTERM
    assert _step_end(cb, args, 5).should_save    # then the Trainer overrode it: no on_save
    control = _epoch_end(cb, args, 5)
    assert control.should_save and not control.should_evaluate
    cb.on_save(args, SimpleNamespace(global_step=5), control)
    assert str(cb.saved) == "/x/checkpoint-5"
    control = _epoch_end(cb, args, 5)
    assert not control.should_save and control.should_evaluate
    untouched = _epoch_end(save_on_signal_callback(StopRequest()), args, 5)  # no signal: as transformers left it
    assert not untouched.should_save and untouched.should_evaluate


def test_signal_save_then_exit_code_and_one_line(tmp_path, capsys):
    trainer = FakeTrainer(tmp_path)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as e, save_on_signal(trainer, True, " (hint)"):
        [cb] = trainer.callbacks
        signal.raise_signal(signal.SIGTERM)   # recorded, training goes on
        _step_end(cb, trainer.args, 4)
        cb.on_save(trainer.args, SimpleNamespace(global_step=4), None)
    assert e.value.code == 143
    assert capsys.readouterr().err.strip() == f"train.py: terminated at step 4: saved {tmp_path / 'checkpoint-4'} (hint)"
    assert signal.getsignal(signal.SIGTERM) is before and not trainer.callbacks


def test_a_weights_only_save_says_it_is_not_resumable(tmp_path, capsys):
    trainer = FakeTrainer(tmp_path)
    with pytest.raises(SystemExit) as e, save_on_signal(trainer, True, "; continue with --resume_from_checkpoint true"):
        [cb] = trainer.callbacks
        cb.request.signum = signal.SIGINT
        _step_end(cb, trainer.args, 2)
        ckpt = tmp_path / "checkpoint-2"     # what save_only_model writes: no optimizer.pt / scheduler.pt
        ckpt.mkdir()
        (ckpt / "adapter_model.safetensors").write_bytes(b"x")
        (ckpt / "trainer_state.json").write_text("{}")
        cb.on_save(trainer.args, SimpleNamespace(global_step=2), None)
    assert e.value.code == 130
    assert capsys.readouterr().err.strip() == (f"train.py: interrupted at step 2: saved {ckpt} "
                                               "(weights only (save_only_model): not resumable)")


@pytest.mark.parametrize("complete", [False, True])
def test_checkpoint_half_written_when_stopped_at_once_is_removed(tmp_path, complete):
    trainer = FakeTrainer(tmp_path)
    part = tmp_path / "checkpoint-3"
    with pytest.raises(KeyboardInterrupt), save_on_signal(trainer, True):
        [cb] = trainer.callbacks
        cb.request.signum = signal.SIGTERM
        _step_end(cb, trainer.args, 3)
        part.mkdir()
        (part / "model.safetensors").write_bytes(b"x")
        if complete:
            (part / "trainer_state.json").write_text("{}")
        raise KeyboardInterrupt   # the second signal, while the save runs
    assert part.is_dir() == complete


def test_switch_off_installs_nothing(tmp_path):
    trainer = FakeTrainer(tmp_path)
    before = signal.getsignal(signal.SIGTERM)
    with save_on_signal(trainer, False):
        assert signal.getsignal(signal.SIGTERM) is before and not trainer.callbacks


def test_jit_checkpoint_only_with_the_switch_off(tmp_path):
    from training.config import load_config

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "d.json").write_text("[]")
    base = {"model_name_or_path": str(tmp_path / "m"), "output_dir": str(tmp_path / "o"),
            "data_path": str(tmp_path / "d.json"), "enable_jit_checkpoint": True}
    with pytest.raises(UserError, match=r"^config: enable_jit_checkpoint: not with save_on_signal true"):
        load_config(base)
    assert load_config({**base, "save_on_signal": False}).enable_jit_checkpoint


def test_importing_the_module_does_not_import_transformers():
    import subprocess
    import sys

    code = "import sys, training.signals; sys.exit('transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_reduce_max_in_one_process_is_the_value():
    from evalsuite.dist import Dist

    assert Dist().reduce_max(15) == 15 and Dist().reduce_max(0) == 0


def test_the_demo_sft_stage_has_its_own_hint(tmp_path, monkeypatch):
    """A demo rerun runs its SFT stage with no resume_from_checkpoint (from step 0), so the signal's line
    says that, not train.py's `--resume_from_checkpoint true`."""
    from pathlib import Path

    from evalsuite.kit import tiny
    from training import demo
    from training.trainers import sft

    preset = Path(__file__).resolve().parents[2] / "configs" / "demo_tiny.yaml"
    cfg = demo.DemoConfig.from_yaml(preset, [f"output_dir={tmp_path}"])
    tcfg = cfg.sft_config(tmp_path / "init", tmp_path / "sft.json", tmp_path, tmp_path / "base", portable=True)
    assert not tcfg.resume_from_checkpoint
    seen = {}
    monkeypatch.setattr(tiny, "build_tiny_vlm", lambda path, **kw: path)
    monkeypatch.setattr(type(tcfg), "check_paths", lambda self: None)
    monkeypatch.setattr(sft, "run_sft", lambda c, hint=None: seen.setdefault("hint", hint))
    demo._train_base(cfg, tmp_path, tmp_path / "sft.json", tmp_path, tmp_path / "base", None)
    assert seen["hint"] == demo.SFT_SIGNAL_HINT
    assert "starts again from step 0" in seen["hint"] and "--resume_from_checkpoint" not in seen["hint"]
