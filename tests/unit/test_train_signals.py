"""training/signals.py without a model: the handler only records the first signal, a second one runs the
handler that was there before (stop at once), the callback asks for a save + stop at the step end, a
checkpoint half written when the run is stopped at once is removed, and the config refuses transformers'
own SIGTERM checkpoint alongside ours. The runs themselves: tests/integration/test_train_signal.py."""
from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from evalsuite.errors import UserError
from training.outdir import Terminated
from training.signals import SaveOnSignalCallback, StopRequest, save_on_signal


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


def test_first_signal_is_recorded_second_runs_the_previous_handler():
    seen = []

    def previous(signum, frame):
        seen.append(signum)
        raise Terminated()

    req = StopRequest()
    req.previous[signal.SIGTERM] = previous
    req.handler(signal.SIGTERM, None)              # first: only the flag
    assert req.signum == signal.SIGTERM and not seen
    with pytest.raises(Terminated):
        req.handler(signal.SIGTERM, None)
    assert seen == [signal.SIGTERM]
    req.previous[signal.SIGINT] = signal.SIG_DFL   # no Python handler before: the exception train.py turns into 130
    with pytest.raises(KeyboardInterrupt):
        req.handler(signal.SIGINT, None)


def test_callback_saves_and_stops_only_after_a_signal():
    req = StopRequest()
    cb = SaveOnSignalCallback(req)
    args = SimpleNamespace(device="cpu", output_dir="/x")
    control = _step_end(cb, args, 1)
    assert not control.should_save and not control.should_training_stop
    req.signum = signal.SIGINT
    control = _step_end(cb, args, 2)
    assert control.should_save and control.should_training_stop and cb.step == 2


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


def test_reduce_max_in_one_process_is_the_value():
    from evalsuite.dist import Dist

    assert Dist().reduce_max(15) == 15 and Dist().reduce_max(0) == 0
