"""lmms-eval tasks scored by an LLM judge, run with evalsuite's judge (--judge; docs/lmms-eval.md).

lmms-eval 0.7.3's judged tasks get their judge from `lmms_eval.llm_judge`: `get_server(API_TYPE, ...)`
builds a provider from `ProviderFactory` (mmvet at import of its utils, llava_in_the_wild and
llava_bench_coco through `verifiers.openai.OpenAIVerifier` on first use), and `API_TYPE` /
`MODEL_VERSION` are read from the environment when the task's utils module is executed (each time a task
yaml is loaded with its functions). evalsuite therefore sets `API_TYPE=openai` and `MODEL_VERSION` and
registers its own provider under the name "openai" before any task yaml is loaded: every request of those
tasks goes to evalsuite's judge (`evalsuite/judge`, the same server as `mmhal`'s) through a reply cache,
and nothing goes to api.openai.com. lmms-eval's prompts, its decoding settings per request (mmvet: max
128 tokens, temperature raised on an unparsable reply) and its parsing and aggregation stay its own.
Replies lmms-eval's own rule cannot read are counted per task (`PARSABLE`; extra.unparsable, unparsable_rate);
more than half unparsable fails the task in one line and stores nothing (`unparsable_failure`).

hallusion_bench_image posts to `OPENAI_API_URL` itself (`requests.post`, read when its utils module is first
imported): evalsuite points it at a local endpoint of its own that answers through the same judge.
Every other task whose scoring calls out is refused before any model loads: `network_calls` finds them
from their source.
"""
from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

from evalsuite.errors import RunFailure, UserError

log = logging.getLogger(__name__)

# lmms-eval tasks verified to send every judge request through lmms_eval.llm_judge's provider
# (their utils read API_TYPE/MODEL_VERSION and call get_server or OpenAIVerifier): they honour --judge
HONOURS_JUDGE = {
    "mmvet": "utils.py: get_server(API_TYPE, ServerConfig(MODEL_VERSION, temperature 0, max_tokens 128))",
    "llava_in_the_wild": "utils.py: OpenAIVerifier(MODEL_VERSION, API_TYPE) -> get_server",
    "llava_bench_coco": "utils.py: OpenAIVerifier(MODEL_VERSION, API_TYPE) -> get_server",
    "hallusion_bench_image": "evaluate_hb.py -> utils.py: requests.post(OPENAI_API_URL) when API_TYPE=openai",
}
# tasks whose aggregation writes (and re-reads, by position) files under lmms-eval's --output_path
NEEDS_OUTPUT_PATH = {"hallusion_bench_image"}

JUDGE_SECTION_TASKS = set(HONOURS_JUDGE)   # a run naming one reads the judge: section (run_config.sections_for)

# what a scoring module's source contains when it asks a model over the network
NETWORK_MARKERS = ("llm_judge", "get_server", "OpenAIVerifier", "verifiers.openai", "requests.post", "requests.get",
                   "import openai", "from openai", "OpenAI(", "AzureOpenAI", "httpx", "urllib.request", "aiohttp",
                   "OPENAI_API", "api.openai.com", "boto3", "google.generativeai", "anthropic")

PROMPT_VERSION = "lmms-eval-llm_judge"
MAX_UNPARSABLE_SHARE = 0.5   # as evalsuite's own judged tasks (tasks/mmhal.py)
MAX_SAME_REQUEST = 20   # mmvet repeats a request 3 times on an empty reply, twice on an unparsable one   # the prompts are lmms-eval's own (its version is in the identity)


class JudgeAbort(BaseException):
    """The judge failed for good. A BaseException: lmms-eval's judged tasks catch every Exception of their
    provider and score it 0 (mmvet) or -1 (llava), which would store numbers nobody judged."""


# ------------------------------------------------------------------------------------ static scan

def _function_modules(config: dict) -> set[str]:
    """The module names of a task yaml's scoring functions (`!function utils.fn`, as a yaml node in
    lmms-eval's "simple" load mode, or a string)."""
    names = [config.get("process_results")]
    for m in config.get("metric_list") or []:
        if isinstance(m, dict):
            names.append(m.get("aggregation"))
    out = set()
    for n in names:
        value = getattr(n, "value", n)
        if isinstance(value, str) and "." in value:
            out.add(value.rsplit(".", 1)[0])
    return out


_IMPORT = re.compile(r"^\s*from\s+(lmms_eval\.tasks\.[\w.]+|\.[\w.]*)\s+import|^\s*import\s+(lmms_eval\.tasks\.[\w.]+)",
                     re.MULTILINE)


def network_calls(yaml_path: str | os.PathLike, config: dict) -> list[str]:
    """["FILE: MARKER", ...]: where the task's scoring modules (and the lmms_eval.tasks modules they
    import) call out over the network; [] for a task scored by rules alone."""
    import importlib.util

    tasks_root = Path(importlib.util.find_spec("lmms_eval").origin).parent
    here = Path(yaml_path).parent
    todo = [(tasks_root.parent if m.startswith("lmms_eval.") else here) / (m.replace(".", "/") + ".py")
            for m in _function_modules(config)]
    seen: set[Path] = set()
    found = []
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        text = path.read_text(encoding="utf-8", errors="replace")
        hits = [m for m in NETWORK_MARKERS if m in text]
        if hits:
            found.append(f"{path.relative_to(tasks_root.parent) if tasks_root.parent in path.parents else path}: "
                         f"{hits[0]}")
        for absolute, plain in _IMPORT.findall(text):
            mod = absolute or plain
            if mod.startswith("."):
                todo.append(path.parent / (mod.strip(".").replace(".", "/") + ".py"))
            else:
                todo.append(tasks_root.parent / (mod.replace(".", "/") + ".py"))
    return sorted(found)


def check_leaves(leaves, judge_cfg, world_size: int) -> bool:
    """UserError (before any model loads) for a judged leaf that would call the network: one that does not
    honour --judge, or one that does without a judge given; True if any leaf needs the judge."""
    needs = False
    for leaf in leaves:
        if not leaf.network:
            continue
        if leaf.lmms_task not in HONOURS_JUDGE:
            raise UserError(f"--tasks {leaf.name}: lmms-eval scores it by calling a model over the network "
                            f"({leaf.network[0]}), which evalsuite's --judge does not reach; refused "
                            "(docs/lmms-eval.md lists the judged tasks that honour --judge)")
        needs = True
    if needs and (judge_cfg is None or not judge_cfg.given):
        names = ", ".join(lf.name for lf in leaves if lf.network)
        raise UserError(f"--tasks {names}: scored by lmms-eval with an LLM judge; give --judge MODEL_DIR or "
                        "--judge http://HOST:PORT/v1 --judge-model NAME (docs/lmms-eval.md), or it would call "
                        "api.openai.com")
    if needs and world_size > 1:
        raise UserError("--tasks: lmms-eval's judged tasks are not run under torchrun (every rank would ask the "
                        "judge); run them on one process")
    return needs


def judge_identity(judge) -> dict:
    """The judge part of a judged leaf's identity: the judge's own (evalsuite/judge/judge.py) without the
    decoding settings, which lmms-eval sets per request, plus whose prompts are sent."""
    from evalsuite.version import lmms_eval_version

    ident = {k: v for k, v in judge.identity.items() if k not in ("temperature", "max_tokens")}
    return {**ident, "prompt": PROMPT_VERSION, "lmms_eval": lmms_eval_version()}


# ------------------------------------------------------------------------------------ unparsable replies
# Whether lmms-eval 0.7.3's own rule reads a judge reply. The released scoring is untouched: these only count
# what it scored without reading (docs/lmms-eval.md "Judged tasks").

def _llava_rule(folder: str):
    """llava_in_the_wild / llava_bench_coco: the task's own `_parse_comparative_scores` (in-the-wild: the first
    two numbers of the first line; coco: a first line of exactly two values) did not give [-1, -1], the
    pair it scores an unreadable review with."""
    def parsable(text: str) -> bool:
        import importlib

        module = importlib.import_module(f"lmms_eval.tasks.{folder}.utils")
        return module._parse_comparative_scores(text).metadata["scores"] != [-1, -1]

    return parsable


def _mmvet_parsable(text: str) -> bool:
    """mmvet (`mmvet_process_results`): the reply's first space-separated word is a float in 0..1; an
    empty reply, or anything else, ends in the score 0 it gives when no score was read."""
    try:
        return 0.0 <= float(text.strip().split(" ")[0].strip()) <= 1.0
    except ValueError:
        return False


def _hallusion_parsable(text: str) -> bool:
    """hallusion_bench_image (`evaluate_by_chatgpt`): "incorrect" / "correct" in the lower-cased reply, or the
    judge's own "unclear"; a reply with none of them is scored "unclear" (2) without being read."""
    low = (text or "").lower()
    return "correct" in low or "unclear" in low


PARSABLE = {"llava_in_the_wild": _llava_rule("llava-in-the-wild"), "llava_bench_coco": _llava_rule("llava-bench-coco"),
            "mmvet": _mmvet_parsable, "hallusion_bench_image": _hallusion_parsable}
# a judged task's request, told apart by lmms-eval's prompt when one name runs several judged tasks
_PROMPT_MARK = {"mmvet": "Compare the ground truth and prediction from AI models",
                "hallusion_bench_image": "Imagine you are an intelligent teacher",
                "llava_in_the_wild": "[End of ", "llava_bench_coco": "[End of "}


def unparsable_failure(task: str, counts: dict) -> str | None:
    """The one-line failure of a judged lmms task with more than half its judgments unparsable, or None."""
    bad, n = counts["unparsable"], counts["judged"]
    if not n or bad <= MAX_UNPARSABLE_SHARE * n:
        return None
    return (f"{task}: {bad} of {n} judge replies are unparsable by lmms-eval's rule (more than "
            f"{MAX_UNPARSABLE_SHARE:.0%}; it would score them as judged); nothing stored. Sample reply: "
            f"{counts['sample'][:160]!r}")


# ------------------------------------------------------------------------------------ the provider

class _Binding:
    """The judge answering lmms-eval's provider now: a Judge, its reply cache, the server (started on the
    first request the cache cannot answer, stopped by `close`)."""

    def __init__(self, judge, cache_root, task: str, log_dir, rank: int = 0, judged: tuple = ()):
        from evalsuite.identity import digest
        from evalsuite.models.cache import ResponseCache

        self.judge, self.task, self.log_dir = judge, task, log_dir
        self.key = judge.key(PROMPT_VERSION)
        self._digest = digest
        self.cache = ResponseCache(Path(cache_root) / "judge", self.key, task, rank) if cache_root else None
        self.stats = {"asked": 0, "cached": 0}
        self.failure: str | None = None
        self._ctx = self._client = self._model = None
        self._lock = threading.Lock()
        self._times: dict[str, int] = {}
        # per judged lmms task: judgment key -> (parsable, reply) of the reply lmms-eval scored it by
        self.judged = tuple(judged)
        self.judgments: dict[str, dict] = {t: {} for t in self.judged}

    def _kind(self, body: dict) -> str | None:
        if len(self.judged) == 1:
            return self.judged[0]
        text = " ".join(str(m.get("content", "")) for m in body.get("messages") or [])
        return next((t for t in self.judged if _PROMPT_MARK.get(t, "\0") in text), None)

    def _record(self, body: dict, reply: dict) -> None:
        kind = self._kind(body)
        if kind not in PARSABLE:
            return
        text = reply.get("content") or ""
        ok = PARSABLE[kind](text)
        if kind == "mmvet":
            # mmvet asks again for the same prompt (higher temperature) until it reads a score; the last
            # reply decides, and one asked at temperature >= 2 is scored 0 without being read
            key = self._digest(body.get("messages"), 64)
            ok = ok and (body.get("temperature") or 0) < 2
        else:
            key = str(len(self.judgments[kind]))
        self.judgments[kind][key] = (ok, text)

    def counts(self, kind: str) -> dict | None:
        """{"unparsable", "judged", "sample" (an unparsable reply)} of judged task `kind`, None if not judged."""
        if kind not in self.judgments:
            return None
        marks = list(self.judgments[kind].values())
        bad = [text for ok, text in marks if not ok]
        return {"unparsable": len(bad), "judged": len(marks), "sample": bad[0] if bad else ""}

    def chat(self, body: dict) -> dict:
        reply = self._chat(body)
        with self._lock:
            self._record(body, reply)
        return reply

    def _chat(self, body: dict) -> dict:
        key = self._digest([self.key, body], 64)
        with self._lock:
            if self.failure:
                raise JudgeAbort(self.failure)
            self._times[key] = self._times.get(key, 0) + 1
            if self._times[key] > MAX_SAME_REQUEST:
                # mmvet asks again, same request, while the score it parsed is outside 0..1: forever
                # with a deterministic judge. The reply is cached, so this would spin without end.
                last = (self.cache.get(key) or {}).get("content", "") if self.cache is not None else ""
                self.failure = (f"{self.task}: lmms-eval asked the judge the same request {MAX_SAME_REQUEST} times "
                                f"(a reply its rules never accept, e.g. mmvet's score outside 0..1: {last[:80]!r})")
                raise JudgeAbort(self.failure)
            if self.cache is not None and key in self.cache:
                self.stats["cached"] += 1
                return self.cache.get(key)
            try:
                if self._client is None:
                    self._ctx = self.judge._serving(self.log_dir)
                    self._client, self._model = self._ctx.__enter__()
                extra = {k: v for k, v in body.items() if k not in ("messages", "temperature", "max_tokens")}
                reply = self._client.chat(self._model, body["messages"], body.get("temperature"),
                                          body.get("max_tokens"), extra=extra)
            except (RunFailure, UserError, OSError) as e:
                self.failure = f"{self.task}: judge failed ({e})"
                raise JudgeAbort(self.failure) from None
            self.stats["asked"] += 1
            if self.cache is not None:
                self.cache.put_many([(key, self.stats["asked"], "judge", reply)])
            return reply

    def close(self) -> None:
        if self._ctx is not None:
            ctx, self._ctx, self._client = self._ctx, None, None
            ctx.__exit__(None, None, None)


_BOUND: _Binding | None = None


class bound:
    """`with bound(judge, cache_root, task, log_dir) as b:` lmms-eval's judge requests go to `judge` inside."""

    def __init__(self, judge, cache_root, task: str, log_dir=None, rank: int = 0, judged: tuple = ()):
        self.binding = _Binding(judge, cache_root, task, log_dir, rank, judged)

    def __enter__(self) -> _Binding:
        global _BOUND
        _BOUND = self.binding
        return self.binding

    def __exit__(self, *exc) -> None:
        global _BOUND
        _BOUND = None
        self.binding.close()


def _provider_class():
    from lmms_eval.llm_judge.base import ServerInterface
    from lmms_eval.llm_judge.protocol import Response

    class EvalsuiteProvider(ServerInterface):
        """lmms-eval's "openai" provider inside `evalsuite run`: the request lmms-eval's OpenAIProvider would
        send (its messages, max_tokens, temperature, top_p, response_format), sent to evalsuite's judge."""

        def is_available(self) -> bool:
            return True

        def evaluate(self, request) -> Response:
            if _BOUND is None:
                raise JudgeAbort("an lmms-eval task asked a judge outside a judged run (evalsuite binds one per "
                                 "task; docs/lmms-eval.md)")
            if request.images:
                raise JudgeAbort(f"{_BOUND.task}: the task sends images to its judge; evalsuite's judge is text-only")
            config = request.config or self.config
            body = {"messages": self.prepare_messages(request), "max_tokens": config.max_tokens,
                    "temperature": config.temperature}
            if config.top_p is not None:
                body["top_p"] = config.top_p
            if config.response_format == "json":
                body["response_format"] = {"type": "json_object"}
            reply = _BOUND.chat(body)
            # as OpenAIProvider returns it: the text stripped, the model the server says answered
            return Response(content=(reply["content"] or "").strip(), model_used=reply.get("model") or config.model_name)

    return EvalsuiteProvider


class _Endpoint:
    """An OpenAI chat-completions endpoint on 127.0.0.1 (a thread of this process) answering through the
    bound judge: for task code that posts to OPENAI_API_URL itself (hallusion_bench). One per process:
    such modules read the URL once, when first imported."""

    def __init__(self):
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    if _BOUND is None:
                        raise JudgeAbort("an lmms-eval task asked a judge outside a judged run")
                    reply = _BOUND.chat({k: v for k, v in body.items() if k != "model"})
                    out = {"object": "chat.completion", "model": reply.get("model", ""), "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply["content"]}}]}
                    code, payload = 200, json.dumps(out).encode()
                except (JudgeAbort, ValueError, KeyError) as e:
                    # the binding keeps the failure: the run fails once lmms-eval returns (it would score it)
                    code, payload = 500, json.dumps({"error": {"message": str(e)}}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/chat/completions"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="evalsuite-lmms-judge").start()


_INSTALLED: _Endpoint | None = None


def install(judge=None) -> None:
    """Point lmms-eval's judge settings at evalsuite (before any judged task yaml is loaded): API_TYPE=openai,
    MODEL_VERSION = the judge's served name (recorded by lmms-eval as `eval_model`), evalsuite's provider as
    lmms-eval's "openai", and OPENAI_API_URL = evalsuite's local endpoint (OPENAI_API_KEY a placeholder: the
    real key, EVALSUITE_JUDGE_API_KEY, stays in evalsuite's client)."""
    global _INSTALLED
    if _INSTALLED is None:
        from lmms_eval.llm_judge import ProviderFactory

        ProviderFactory.register_provider("openai", _provider_class())
        _INSTALLED = _Endpoint()
    os.environ.update({"API_TYPE": "openai", "OPENAI_API_URL": _INSTALLED.url, "OPENAI_API_KEY": "evalsuite-local"})
    no_proxy = os.environ.get("NO_PROXY", os.environ.get("no_proxy", ""))
    if "127.0.0.1" not in no_proxy:   # requests would send a 127.0.0.1 URL through an HTTP(S)_PROXY
        os.environ["NO_PROXY"] = os.environ["no_proxy"] = ",".join(x for x in (no_proxy, "127.0.0.1") if x)
    if judge is not None:
        os.environ["MODEL_VERSION"] = judge_model_name(judge)


def judge_model_name(judge) -> str:
    from evalsuite.judge.server import SERVED_NAME

    return str(judge.config.model) if judge.config.url else SERVED_NAME
