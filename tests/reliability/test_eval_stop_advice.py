"""`evalsuite run` stopped by SIGINT / SIGTERM (issue 37 item 6): one line giving the command that continues
it, exit 130 / 143, no traceback."""
from __future__ import annotations

import signal

import pytest

from tests.reliability.helpers import error_lines


@pytest.mark.parametrize("stop,code,word", [(KeyboardInterrupt, 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_stopped_eval_says_the_command_that_continues_it(monkeypatch, capsys, tiny_vlm_dir, world_dir, tmp_path,
                                                         stop, code, word):
    import os

    import evalsuite.run as run
    from evalsuite.cli import main

    def stopped(cfg, *a, **k):
        if stop == "SIGTERM":
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt()

    monkeypatch.setattr(run, "run_eval", stopped)
    argv = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world_dir),
            "--store", str(tmp_path / "store"), "--output", str(tmp_path / "out")]
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == code and "Traceback" not in err
    assert error_lines(err) == [f"evalsuite: {word} (finished tasks are stored; continue with the same command: "
                                f"evalsuite {' '.join(argv)})"]
    assert signal.getsignal(signal.SIGTERM) is before   # the handler is the run's only
