"""A fake OpenAI-compatible judge server for tests: http.server on 127.0.0.1 in a thread.

    with FakeJudge(reply=lambda messages: "fine. Rating: 4") as fake:
        fake.url            # http://127.0.0.1:PORT/v1
        fake.requests       # chat requests received (bodies), fake.max_in_flight, fake.auth headers

Knobs (attributes, changeable while it runs): models, reply, reply_body (a function of the whole request
body, e.g. to answer by prompt and temperature: `canned_replies`; wins over reply), fail_first (answer HTTP
500 to that many chat requests first), delay_s (sleep before answering), huge_bytes (answer a body of that
many bytes).
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def rating_reply(messages: list[dict]) -> str:
    """A judge that rates by the answer's length: deterministic and different per answer."""
    text = messages[-1]["content"]
    answer = text.rsplit("### LMM Response to Evaluate", 1)[-1]
    return f"The response is plausible.\nRating: {len(answer.split()) % 7}"


def canned_replies(cases: list[dict]):
    """reply_body for recorded replies: the case whose `marker` is in the prompt answers
    `replies[str(temperature)]` (else `replies["default"]`); a prompt no case marks is an AssertionError."""
    def reply(body: dict) -> str:
        text = "\n".join(str(m.get("content")) for m in body["messages"])
        hits = [c for c in cases if c["marker"] in text]
        assert len(hits) == 1, f"{len(hits)} cases match the judge prompt {text[-200:]!r}"
        replies = hits[0]["replies"]
        return replies.get(str(float(body.get("temperature", 0.0))), replies.get("default"))
    return reply


class FakeJudge:
    def __init__(self, models=("judge-a",), reply=rating_reply, fail_first: int = 0, delay_s: float = 0.0,
                 huge_bytes: int = 0, reply_body=None):
        self.models, self.reply, self.reply_body = list(models), reply, reply_body
        self.fail_first, self.delay_s, self.huge_bytes = fail_first, delay_s, huge_bytes
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def do_GET(self):
                if self.path.endswith("/models"):
                    data = [{"id": m, "object": "model", "root": f"/models/{m}"} for m in fake.models]
                    self._send(200, json.dumps({"object": "list", "data": data}).encode())
                elif self.path == "/health":
                    self._send(200, b"")
                else:
                    self._send(404, b"{}")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with fake._lock:
                    fake.requests.append(body)
                    fake.auth.append(self.headers.get("Authorization"))
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    fail = fake.fail_first > 0
                    if fail:
                        fake.fail_first -= 1
                try:
                    if fake.delay_s:
                        time.sleep(fake.delay_s)
                    if fail:
                        status, payload = 500, b'{"error": "busy"}'
                    elif fake.huge_bytes:
                        status, payload = 200, b" " * fake.huge_bytes
                    else:
                        content = fake.reply_body(body) if fake.reply_body else fake.reply(body["messages"])
                        out = {"id": "x", "object": "chat.completion", "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": content}}]}
                        status, payload = 200, json.dumps(out).encode()
                finally:
                    # done before the reply goes out: a client may send its next request as soon as it has
                    # the reply, before this thread would get to count the request as finished
                    with fake._lock:
                        fake.in_flight -= 1
                self._send(status, payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread: threading.Thread | None = None

    def chat_requests(self) -> list[dict]:
        return list(self.requests)

    def start(self) -> "FakeJudge":
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "FakeJudge":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
