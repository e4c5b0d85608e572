"""SIGINT / SIGTERM at an entry point: one line saying what continues the run, exit 130 / 143 (evalsuite run,
train.py)."""
from __future__ import annotations

import contextlib

from evalsuite.errors import say


def _text(hint) -> str:
    if not callable(hint):
        return hint
    try:
        return hint()
    except Exception:   # the line must come out whatever the hint's reading finds
        return ""


class Terminated(BaseException):
    """SIGTERM as an exception (like KeyboardInterrupt for SIGINT), so the entry point prints one line."""


@contextlib.contextmanager
def interrupt_exit(prog: str, out_hint="", sigint: bool = True):
    """Within: SIGTERM raises Terminated. On KeyboardInterrupt/Terminated: one stderr line, SystemExit(130/143).
    `out_hint`: text appended to the line, or a function giving it then (what continues the run depends on
    what it saved). `sigint`: Ctrl-C interrupts even where SIGINT was inherited ignored."""
    import signal
    import threading

    installed = threading.current_thread() is threading.main_thread()
    old = old_int = None
    if installed:
        def on_term(signum, frame):
            raise Terminated()
        old = signal.signal(signal.SIGTERM, on_term)
        # Ctrl-C interrupts training even where the launcher left SIGINT ignored (an inherited SIG_IGN:
        # background jobs, some process managers and test runners)
        old_int = signal.signal(signal.SIGINT, signal.default_int_handler) if sigint else None
    try:
        yield
    except KeyboardInterrupt:
        say(f"{prog}: interrupted{_text(out_hint)}")
        raise SystemExit(130) from None
    except Terminated:
        say(f"{prog}: terminated{_text(out_hint)}")
        raise SystemExit(143) from None
    finally:
        if installed:
            signal.signal(signal.SIGTERM, old)
            if sigint:
                signal.signal(signal.SIGINT, old_int)
