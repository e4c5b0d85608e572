"""The `judge:` section of an evaluation run (docs/judge.md)."""
from __future__ import annotations

from dataclasses import dataclass

from evalsuite.config import check_fields, opt
from evalsuite.errors import UserError

API_KEY_ENV = "EVALSUITE_JUDGE_API_KEY"   # the only place a key is read from; never stored or logged


def is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


@dataclass
class JudgeConfig:
    """Which judge scores judged tasks, and how it is asked. Set by --judge PATH|URL and --judge-model NAME."""

    model: str | None = opt(None, "a local model directory (evalsuite serves it with `vllm serve`), or with "
                                  "judge.url the model name the server serves (--judge-model)")
    url: str | None = opt(None, "an OpenAI-compatible server's base URL, e.g. http://127.0.0.1:8000/v1 (the key, "
                                f"if any, from ${API_KEY_ENV}); null = serve judge.model locally")
    max_concurrency: int = opt(8, "judge requests in flight at once (a thread pool)", identity=False, ge=1)
    temperature: float = opt(0.0, "the judge's sampling temperature (0 = greedy, as the released scripts)",
                              ge=0)
    max_tokens: int = opt(1024, "token cap of a judge reply", ge=1)
    timeout_s: float = opt(120.0, "seconds a request may wait for the server (to connect, or for its next bytes) "
                                  "before it is retried", identity=False, gt=0)
    retries: int = opt(3, "retries of a request after a timeout, a connection error or an HTTP 5xx/429 "
                          "(back-off 1, 2, 4 ... s, at most 30 s)", identity=False, ge=0)
    serve_args: list[str] = opt(help="extra arguments of `vllm serve` for a local judge, e.g. "
                                     "['--max-model-len', '4096'] (part of the judge's identity)", factory=list)
    start_timeout_s: float = opt(900.0, "seconds a local judge server may take to answer its health check "
                                        "(/health)", identity=False, gt=0)

    def __post_init__(self) -> None:
        if self.url is not None and not is_url(self.url):
            raise UserError(f"judge.url: {self.url!r} is not an http:// or https:// URL")
        check_fields(self, "judge")

    def unread(self) -> list[tuple[str, str, object, object]]:
        """The local server's settings with a server URL (evalsuite/config.py report_unread)."""
        return [(f, "url", self.url, None) for f in ("serve_args", "start_timeout_s")] if self.url else []

    @property
    def given(self) -> bool:
        return bool(self.model or self.url)

    def decoding(self) -> dict:
        return {"temperature": float(self.temperature), "max_tokens": int(self.max_tokens)}
