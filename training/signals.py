"""Save a checkpoint and stop on the first SIGTERM / SIGINT during training (`save_on_signal`, default true).

    with save_on_signal(trainer, cfg.save_on_signal, hint):    # around trainer.train(...) (sft.py, dpo.py)
        trainer.train(resume_from_checkpoint=...)

Cluster schedulers (Slurm, Kubernetes) send SIGTERM some seconds before they kill a job; without this a
run keeps only its periodic checkpoint-N folders. Here:
- first signal: the handler only records it. At the end of the current optimizer step
  `SaveOnSignalCallback` takes the largest signal number over all ranks (an OR of the flag, so every
  rank stops at the same step and none waits in a collective), then asks the Trainer for its normal
  checkpoint (`control.should_save`: checkpoint-<step>, what `save_steps` writes, with `save_only_model`
  and `save_total_limit` applied by transformers) and to stop (`control.should_training_stop`). After
  `train()` returns, one stderr line names the folder and the process exits 143 (SIGTERM) / 130 (SIGINT).
- second signal: the handler that was there before runs (train.py's `interrupt_exit`: stop at once, exit
  143 / 130). If it lands while that checkpoint is being written, the half-written folder (no
  trainer_state.json yet) is removed, so `--resume_from_checkpoint true` never picks it. The same signal
  again within REPEAT_WINDOW_S of the first is the same request, not a second one: under torchrun a worker
  gets it from Slurm (which signals every process of the step) and from torchrun's agent (which forwards
  SIGTERM/SIGINT to every worker) milliseconds apart.
- a signal the process ignored when training started (SIG_IGN: e.g. SIGINT of a background job `cmd &`
  in a non-interactive shell) stays ignored: no handler is installed for it.
- `save_strategy: best`: the Trainer drops a save at an evaluation whose metric is not the best; the
  signal's save is then asked for again at the epoch's end (before the loop returns), so it still happens.
- `save_only_model`: the folder holds the weights only, which cannot be resumed (training/resume.py);
  the one line says so instead of the hint.
- a signal after the last step's end (the run's own closing save/log): no step end sees it; the
  previous handler's behaviour applies as the run returns (exit 143 / 130, nothing merged).
docs/reliability.md says why and how to turn it off.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import shutil
import signal
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

# The same signal again within this many seconds is the first one delivered twice (Slurm signals every
# process of the step and torchrun's agent forwards SIGTERM/SIGINT to each worker: both arrive within
# milliseconds), not a second request. Far longer than any fan-out; the cost: a person's deliberate second
# Ctrl-C / kill within 5 s of the first is taken as the same request, one later than that stops at once.
REPEAT_WINDOW_S = 5.0

EXIT_CODE = {signal.SIGTERM: 143, signal.SIGINT: 130}
WORD = {signal.SIGTERM: "terminated", signal.SIGINT: "interrupted"}


class StopRequest:
    """The first signal's number (0 = none yet) and when it came; the handler sets them and does nothing else."""

    def __init__(self, clock=time.monotonic):
        self.signum = 0
        self.at = 0.0
        self.clock = clock
        self.previous: dict[int, object] = {}

    def handler(self, signum, frame):
        now = self.clock()
        if not self.signum:
            self.signum, self.at = signum, now
            return
        if signum == self.signum and now - self.at < REPEAT_WINDOW_S:
            return  # the first signal delivered again (REPEAT_WINDOW_S)
        _stop_now(signum, self.previous.get(signum), frame)


def _stop_now(signum, previous, frame):
    """What the signal did before training installed its handler (train.py: an exception -> one line, exit)."""
    if callable(previous):
        previous(signum, frame)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    from evalsuite.interrupts import Terminated

    raise Terminated()


@functools.cache
def _callback_class():
    """SaveOnSignalCallback, made on first use: transformers is imported only when training runs."""
    from transformers import TrainerCallback

    class SaveOnSignalCallback(TrainerCallback):
        """At each optimizer step's end: the recorded signal agreed over the ranks -> save and stop."""

        def __init__(self, request: StopRequest):
            self.request = request
            self.signum = 0           # the agreed signal, once acted on
            self.step: int | None = None
            self.saved: Path | None = None

        def on_step_end(self, args, state, control, **kwargs):
            if self.step is not None:
                return
            from evalsuite.dist import Dist

            signum = Dist.current().reduce_max(int(self.request.signum), device=args.device)
            if signum:
                self.signum, self.step = signum, state.global_step
                control.should_save = True
                control.should_training_stop = True

        def on_epoch_end(self, args, state, control, **kwargs):
            # the step's save did not happen: `save_strategy: best` overrides should_save after an evaluation
            # whose metric is not the best (Trainer._maybe_log_save_evaluate). The epoch-end pass that follows
            # the stop saves when asked; no evaluation there, which would override it again
            if self.step is not None and self.saved is None and state.global_step == self.step:
                control.should_save = True
                control.should_evaluate = False

        def on_save(self, args, state, control, **kwargs):
            if self.step is not None and state.global_step == self.step:
                self.saved = Path(args.output_dir) / f"checkpoint-{self.step}"

    return SaveOnSignalCallback


def save_on_signal_callback(request: StopRequest):
    """The TrainerCallback that turns `request` into a save + stop at the step's end."""
    return _callback_class()(request)


@contextlib.contextmanager
def save_on_signal(trainer, enabled: bool = True, hint: str = ""):
    """Around `trainer.train()`: the module docstring's behaviour; `enabled` false (or not the main thread,
    where no handler can be installed) leaves the signals as they are."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    request = StopRequest()
    callback = save_on_signal_callback(request)
    trainer.add_callback(callback)
    for sig in EXIT_CODE:
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue  # ignored by whoever started us (a background job's SIGINT): stays ignored
        request.previous[sig] = signal.signal(sig, request.handler)
    try:
        yield
    except BaseException:
        # stopped at once (a second signal, or a failure) while the checkpoint asked for here was written
        if callback.step is not None and callback.saved is None and trainer.args.should_save:
            part = Path(trainer.args.output_dir) / f"checkpoint-{callback.step}"
            if part.is_dir() and not (part / "trainer_state.json").is_file():
                shutil.rmtree(part, ignore_errors=True)
        raise
    finally:
        for sig, old in request.previous.items():
            signal.signal(sig, old)
        trainer.remove_callback(callback)
    if callback.saved is not None:
        from evalsuite.dist import Dist
        from evalsuite.errors import say

        dist = Dist.current()
        dist.barrier()  # no rank exits (torchrun would then kill the rest) before rank 0 has saved
        try:
            if trainer.args.should_save:
                from training.resume import WEIGHTS_ONLY, checkpoint_problem

                if checkpoint_problem(callback.saved) == WEIGHTS_ONLY:
                    hint = f" ({WEIGHTS_ONLY})"
                say(f"train.py: {WORD[callback.signum]} at step {callback.step}: saved {callback.saved}{hint}")
        finally:
            # nor before rank 0 has said so: torchrun SIGTERMs the other ranks ~0.1-2 s after one exits, which
            # cut rank 0's line off (the previous handler's "terminated" line instead) when it was that much
            # slower than rank 1 to get here from the barrier above (a loaded machine); in a finally, so a
            # failure between the barriers does not leave the other ranks waiting for rank 0
            dist.barrier()
        raise SystemExit(EXIT_CODE[callback.signum])
    if request.signum:  # arrived after the last step's end: as without this switch
        _stop_now(request.signum, request.previous.get(request.signum), None)


def resumable_checkpoint(out: Path, cfg) -> str | None:
    """The latest complete checkpoint-N in `out` (training/resume.py) of a run with cfg's own
    configuration (OUTPUT_DIR/train_run.json, training/outdir.py), else None: the CSR loop then removes
    `out` and trains afresh, which one log line says (with why) when `out` holds anything."""
    from training.outdir import same_run_config
    from training.resume import latest_checkpoint

    out = Path(out)
    if not out.is_dir() or not any(out.iterdir()):
        return None
    found = None
    same, why = same_run_config(out, cfg)
    if same:
        found, why = latest_checkpoint(out)
    if found is None:
        log.warning("%s: not continued (%s): removed, training starts afresh", out, why)
        return None
    return str(found)


def signal_hint(cfg) -> str:
    """How to continue from the signal's checkpoint: the CSR loop resumes it when rerun (training/csr/loop.py)."""
    if cfg.method == "csr":
        return "; rerun the same command: the CSR loop continues its DPO stage from it"
    return "; continue with --resume_from_checkpoint true"
