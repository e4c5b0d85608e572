"""The local judge: what a servable model directory is, and the launcher's start/stop (a stand-in
`vllm` script that serves /health, so no vLLM is needed here)."""
from __future__ import annotations

import json
import os
import signal
import textwrap
import time

import pytest

from evalsuite.errors import RunFailure, UserError
from evalsuite.judge.server import JudgeServer, check_servable


def _model_dir(tmp_path, config=True, weights=True, template="file"):
    d = tmp_path / "judge"
    d.mkdir()
    if config:
        (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    if weights:
        (d / "model.safetensors").write_bytes(b"x")
    if template == "file":
        (d / "chat_template.jinja").write_text("{{ messages }}")
    elif template == "tokenizer":
        (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return d


def test_servable(tmp_path):
    assert check_servable(_model_dir(tmp_path)).name == "judge"


@pytest.mark.parametrize("kw,msg", [
    ({"config": False}, "no config.json"),
    ({"weights": False}, "no .safetensors weights"),
    ({"template": None}, "no chat template"),
])
def test_not_servable(tmp_path, kw, msg):
    with pytest.raises(UserError, match=msg):
        check_servable(_model_dir(tmp_path, **kw))


def test_template_in_tokenizer_config(tmp_path):
    check_servable(_model_dir(tmp_path, template="tokenizer"))


def test_missing_dir(tmp_path):
    with pytest.raises(UserError, match="no such directory"):
        check_servable(tmp_path / "nope")


def _fake_env(tmp_path, body: str):
    """A python that runs `body` for `-m vllm.entrypoints.openai.api_server --model DIR --host H --port P ...`
    (and is the real interpreter otherwise)."""
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    import sys

    (bin_dir / "serve.py").write_text(textwrap.dedent(body))
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ]; then shift 2; exec {sys.executable} {bin_dir / "serve.py"} "$@"; fi\n'
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return str(python)


HEALTHY = """
import os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
open(os.environ["PIDFILE"], "w").write(str(os.getpid()))
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (not yet reaped by its parent) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_starts_waits_and_stops(tmp_path, monkeypatch):
    monkeypatch.setenv("PIDFILE", str(tmp_path / "pid"))
    py = _fake_env(tmp_path, HEALTHY)
    server = JudgeServer(_model_dir(tmp_path), py, tmp_path / "logs" / "judge.log", ["--max-model-len", "64"],
                         start_timeout_s=30, poll_s=0.05)
    with server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.command()[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", str(tmp_path / "judge")]
        assert server.command()[-2:] == ["--max-model-len", "64"]
        pid = int((tmp_path / "pid").read_text())
        assert _alive(pid)
    assert not _alive(pid) and server.proc is None


def test_stopped_on_error_inside(tmp_path, monkeypatch):
    monkeypatch.setenv("PIDFILE", str(tmp_path / "pid"))
    py = _fake_env(tmp_path, HEALTHY)
    with pytest.raises(ValueError):
        with JudgeServer(_model_dir(tmp_path), py, tmp_path / "judge.log", poll_s=0.05):
            pid = int((tmp_path / "pid").read_text())
            raise ValueError("boom")
    assert not _alive(pid)


def test_sigterm_stops_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PIDFILE", str(tmp_path / "pid"))
    py = _fake_env(tmp_path, HEALTHY)
    with pytest.raises(SystemExit):
        with JudgeServer(_model_dir(tmp_path), py, tmp_path / "judge.log", poll_s=0.05):
            pid = int((tmp_path / "pid").read_text())
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert not _alive(pid)
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)


def test_exit_during_start_names_the_log(tmp_path):
    py = _fake_env(tmp_path, "import sys; print('no such model'); sys.exit(3)\n")
    log = tmp_path / "judge.log"
    with pytest.raises(RunFailure) as e:
        JudgeServer(_model_dir(tmp_path), py, log, poll_s=0.05).start()
    assert "exited with code 3" in str(e.value) and str(log) in str(e.value)
    assert "no such model" in log.read_text()


def test_start_timeout_names_the_log(tmp_path):
    py = _fake_env(tmp_path, "import time; time.sleep(60)\n")
    log = tmp_path / "judge.log"
    t0 = time.monotonic()
    with pytest.raises(RunFailure, match=r"not healthy after 1 s \(judge.start_timeout_s; log: "):
        JudgeServer(_model_dir(tmp_path), py, log, start_timeout_s=1, poll_s=0.05).start()
    assert time.monotonic() - t0 < 20


SERVING = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
name = sys.argv[sys.argv.index("--served-model-name") + 1]
class H(BaseHTTPRequestHandler):
    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self._send({"data": [{"id": name}]})
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._send({"model": req["model"], "choices": [{"message": {"content": "ok. Rating: 4"}}]})
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_local_judge_identity_and_serving(tmp_path, monkeypatch):
    """Judge.resolve on a model directory: the weights' digest in the identity; ask() starts the server
    (a stand-in `vllm serve`), judges, caches, and stops it; a second ask starts nothing."""
    from evalsuite.engines import vllm_process as vllm_engine
    from evalsuite.identity import checkpoint_hash
    from evalsuite.judge import judge as judge_mod
    from evalsuite.judge.config import JudgeConfig

    py = _fake_env(tmp_path, SERVING)
    monkeypatch.setattr(judge_mod, "_vllm_python", lambda: py)
    monkeypatch.setattr(vllm_engine, "engine_versions", lambda python, where="": {"package": "vllm-test"})
    d = _model_dir(tmp_path)
    j = judge_mod.Judge.resolve(JudgeConfig(model=str(d), serve_args=["--max-model-len", "64"]), "mmhal")
    assert j.identity == {"kind": "local", "weights": checkpoint_hash(d), "prompt_files": j.identity["prompt_files"],
                          "server": "vllm-test", "serve_args": ["--max-model-len", "64"], "temperature": 0.0,
                          "max_tokens": 1024}
    reqs = [[{"role": "user", "content": f"q{i}"}] for i in range(3)]
    got = j.ask(reqs, tmp_path / "resume", "mmhal", "v1", tmp_path / "out")
    assert [r["content"] for r in got] == ["ok. Rating: 4"] * 3
    assert (tmp_path / "out" / "judge_server.log").is_file()
    (tmp_path / "out" / "judge_server.log").unlink()
    assert j.ask(reqs, tmp_path / "resume", "mmhal", "v1", tmp_path / "out") == got
    assert not (tmp_path / "out" / "judge_server.log").exists()   # all cached: no server started
    # another seed's weights: another judge
    (d / "model.safetensors").write_bytes(b"y")
    other = judge_mod.Judge.resolve(JudgeConfig(model=str(d), serve_args=["--max-model-len", "64"]), "mmhal")
    assert other.key("v1") != j.key("v1")
