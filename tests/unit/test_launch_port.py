"""tests/conftest.py `launch`: a launcher whose port was taken between free_port() and its bind is started
again on another port; any other failure is returned as it is (the multi-process tests' launches use it)."""
from __future__ import annotations

import socket
import sys

from tests import conftest

# binds the port it is given, as torchrun's rendezvous store does, failing with the line torchrun prints
FAKE_LAUNCHER = """
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit("DistNetworkError: The server socket has failed to listen ... name: EADDRINUSE, message: address "
             "already in use")
print("bound", sys.argv[1])
sys.exit(int(sys.argv[2]))
"""


def _argv(code: int):
    return lambda port: [sys.executable, "-c", FAKE_LAUNCHER, str(port), str(code)]


def test_a_taken_port_is_tried_again_with_another(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        ports = iter([taken, taken, conftest.free_port()])
        tried = []

        def next_port():
            tried.append(next(ports))
            return tried[-1]

        monkeypatch.setattr(conftest, "free_port", next_port)
        proc = conftest.launch(_argv(0), capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == f"bound {tried[2]}\n", proc.stderr
    assert tried[:2] == [taken, taken] and len(tried) == 3


def test_other_failures_and_the_last_attempt_are_returned(monkeypatch):
    calls = []
    monkeypatch.setattr(conftest, "free_port", lambda: calls.append(1) or _free())
    proc = conftest.launch(_argv(3), capture_output=True, text=True)
    assert proc.returncode == 3 and len(calls) == 1      # a failure of its own: not started again
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        calls.clear()
        monkeypatch.setattr(conftest, "free_port", lambda: calls.append(1) or held.getsockname()[1])
        proc = conftest.launch(_argv(0), attempts=2, capture_output=True, text=True)
    assert proc.returncode == 1 and "EADDRINUSE" in proc.stderr and len(calls) == 2


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
