"""An OpenAI-compatible chat-completions client (stdlib only): bounded retries with back-off, a reply size
cap, and `map_chat` for bounded concurrency.

Retried: timeouts, connection errors, HTTP 5xx and 429 (a server that is busy or restarting). Not retried:
other HTTP errors, a reply over MAX_REPLY_BYTES, a reply that is not a chat completion (asking again would
get the same). Every failure is one JudgeError line naming the URL.
"""
from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from collections.abc import Callable

from evalsuite.errors import RunFailure

log = logging.getLogger(__name__)

MAX_REPLY_BYTES = 1 << 20   # a judge's rating fits in a few KB; anything near this is a broken server


class JudgeError(RunFailure):
    """A judge request that failed for good (after its retries)."""


class _Retryable(Exception):
    pass


_SKIPPED = object()


class ChatClient:
    """Requests to one server; `api_key` goes only into the Authorization header."""

    def __init__(self, url: str, timeout_s: float = 120.0, retries: int = 3, api_key: str | None = None,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0):
        self.url = url.rstrip("/")
        self.timeout_s, self.retries = timeout_s, retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self._key = api_key

    def _headers(self) -> dict:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            h["Authorization"] = f"Bearer {self._key}"
        return h

    def _once(self, path: str, body: dict | None) -> dict:
        url = f"{self.url}{path}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(url, data=data, headers=self._headers(), method="GET" if body is None else "POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as e:
            if e.code >= 500 or e.code == 429:
                raise _Retryable(f"HTTP {e.code}") from None
            detail = e.read(300).decode("utf-8", "replace").strip().replace("\n", " ")
            raise JudgeError(f"judge {url}: HTTP {e.code} {e.reason}: {detail[:200]}") from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError,
                http.client.HTTPException, OSError) as e:
            reason = getattr(e, "reason", e)
            raise _Retryable(f"{type(reason).__name__}: {reason}") from None
        if len(raw) > MAX_REPLY_BYTES:
            raise JudgeError(f"judge {url}: reply larger than {MAX_REPLY_BYTES // (1 << 20)} MB; refused")
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise JudgeError(f"judge {url}: reply is not JSON: {raw[:80]!r}") from None

    def request(self, path: str, body: dict | None = None) -> dict:
        """One request with up to `retries` retries (exponential back-off) on retryable failures."""
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s))
            try:
                return self._once(path, body)
            except _Retryable as e:
                last = str(e)
                log.debug("judge %s%s: %s (attempt %d of %d)", self.url, path, last, attempt + 1, self.retries + 1)
        n = self.retries + 1
        raise JudgeError(f"judge {self.url}{path}: {last} ({n} attempt{'s' if n > 1 else ''}); is the judge server "
                         "running and reachable?")

    def models(self) -> list[dict]:
        """The server's model list (GET /models): [{"id": ...}, ...]."""
        reply = self.request("/models")
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
            raise JudgeError(f"judge {self.url}/models: not an OpenAI model list")
        return data

    def chat(self, model: str, messages: list[dict], temperature: float | None, max_tokens: int | None,
             extra: dict | None = None) -> dict:
        """{"content": the reply text, "model": the model the server says answered}. `extra`: more body
        fields (top_p, response_format); a None setting is left out (the server's default)."""
        body = {"model": model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens,
                **(extra or {})}
        reply = self.request("/chat/completions", {k: v for k, v in body.items() if v is not None})
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise JudgeError(f"judge {self.url}/chat/completions: reply has no choices[0].message.content") from None
        if not isinstance(content, str):
            raise JudgeError(f"judge {self.url}/chat/completions: reply content is {type(content).__name__}, not text")
        return {"content": content, "model": str(reply.get("model", ""))}


def map_chat(fn: Callable[[int], dict], n: int, max_concurrency: int, on_done: Callable[[int, dict], None],
             desc: str = "judge") -> None:
    """fn(0..n-1) on at most `max_concurrency` threads, on_done(i, result) in the calling thread as each finishes.
    The first failure stops what has not started and is raised once the running requests have returned."""
    from evalsuite.progress import progress_bar

    if n == 0:
        return
    stop = threading.Event()

    def guarded(i: int):
        if stop.is_set():   # a request failed for good: ask nothing more
            return _SKIPPED
        try:
            return fn(i)
        except BaseException:
            stop.set()
            raise

    with ThreadPoolExecutor(max_workers=max_concurrency) as pool, progress_bar(total=n, desc=desc, unit="req",
                                                                               disable=n < 2) as bar:
        futures = {pool.submit(guarded, i): i for i in range(n)}
        pending = set(futures)
        failed: BaseException | None = None
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    if f.cancelled():
                        continue
                    err = f.exception()
                    if err is not None:
                        failed = failed or err
                        continue
                    if f.result() is _SKIPPED:
                        continue
                    on_done(futures[f], f.result())   # here, in this thread: one writer
                    bar.update(1)
                if failed is not None:
                    for f in pending:
                        f.cancel()
        except BaseException:   # Ctrl-C, SIGTERM's SystemExit, a failed write: start nothing more
            stop.set()
            for f in futures:
                f.cancel()
            raise
        if failed is not None:
            raise failed
