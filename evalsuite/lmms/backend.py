"""THE module that imports lmms_eval: evalsuite's VLM as an lmms-eval model, lmms-eval's task index and
its evaluator. Importing it costs ~6 s (lmms_eval.api.model pulls torch + transformers), so callers
import it inside functions (evalsuite/lmms/task.py does).

    from evalsuite.lmms import backend as lb
    lm = lb.make_model(VLMBackend.from_checkpoint("ckpt/"), cache_root="out/.resume/lmms")
    raw = lb.evaluate(lm, [{"task": "evalsuite_mme", "dataset_path": "parquet", ...}])

`manifests` is the `lmms_eval.models` entry point, so `lmms-eval --model evalsuite --model_args
pretrained=DIR,batch_size=4` works once evalsuite is pip-installed (docs/lmms-eval.md).

lmms-eval sends ALL requests of one type in one call and expects answers in the same order.
EvalsuiteLMM looks every request up in the per-sample response cache (evalsuite/models/cache.py),
groups the rest by generation config, answers them in batches and persists each batch before the
next: a crash keeps what was finished.
"""
from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass, field

from evalsuite.dist import Dist
from evalsuite.gen_settings import GenConfig
from evalsuite.lmms import YAML_DIR
from evalsuite.models.cache import ResponseCache, request_key
from evalsuite.types import GenRequest

log = logging.getLogger(__name__)

MODEL_ID = "evalsuite"


def prepare_env() -> None:
    """Offline flags and lmms-eval's request-cache dir (evalsuite/env.py). The entry points set them already;
    lmms-eval's own CLI (`--model evalsuite`) starts without them, and lmms_eval/huggingface_hub read them
    when imported, so this module (imported lazily, only where lmms-eval runs) sets them too (setdefault)."""
    from evalsuite.env import set_offline_env

    set_offline_env()


prepare_env()  # lmms_eval and huggingface_hub read these at import time (docs/lmms-eval.md)

from lmms_eval.api.model import lmms  # noqa: E402

# ------------------------------------------------------------------------------- evaluator, task index


def _forward_loguru(message) -> None:
    record = message.record
    logging.getLogger(record["name"] or "lmms_eval").log(max(record["level"].no, logging.DEBUG), record["message"])


def _route_loguru() -> None:
    """Importing lmms_eval.models replaces every loguru sink with a stdout one: send its logs to `logging`."""
    from loguru import logger

    logger.remove()
    logger.add(_forward_loguru, level="INFO", format="{message}")


_EVALUATOR = None


def import_evaluator():
    """`lmms_eval.evaluator`, imported once per process (~10 s more), with the filelock guard."""
    global _EVALUATOR
    if _EVALUATOR is None:
        import lmms_eval.models  # noqa: F401  (its import-time logger reset must happen before ours)
        from lmms_eval import evaluator

        try:
            import filelock._api  # noqa: F401
        except ModuleNotFoundError:  # filelock>=4 lacks the module simple_evaluate patches (docs/lmms-eval.md)
            evaluator._enable_reentrant_filelocks._patched = True
        _route_loguru()
        _EVALUATOR = evaluator
    return _EVALUATOR


_TASK_MANAGERS: dict[bool, object] = {}


def task_manager(include_defaults: bool = False):
    """TaskManager over evalsuite's yamls; with `include_defaults` also lmms-eval's ~2000 (~10 s, cached)."""
    if include_defaults not in _TASK_MANAGERS:
        import_evaluator()
        from lmms_eval.tasks import TaskManager

        _TASK_MANAGERS[include_defaults] = TaskManager(
            "WARNING", include_path=str(YAML_DIR), include_defaults=include_defaults,
        )
    return _TASK_MANAGERS[include_defaults]


@dataclass
class TaskNode:
    """A task, group or tag of lmms-eval's index. `config` is a task's yaml (functions not imported) or
    a group's own keys (aggregate_metric_list, metadata); `item` is what a group yaml listed (a name or
    an inline override dict)."""

    name: str
    kind: str                               # "task" | "group" | "tag"
    config: dict = field(default_factory=dict)
    children: list["TaskNode"] = field(default_factory=list)
    item: str | dict = ""
    path: str = ""                          # a task's yaml file (its `!function` modules are beside it)

    def leaves(self) -> list["TaskNode"]:
        return [self] if self.kind == "task" else [leaf for c in self.children for leaf in c.leaves()]


def task_node(tm, item: str | dict) -> TaskNode | None:
    """The index entry `item` (a name, or a group yaml's inline `{task: name, ...}`) as a tree; None if unknown."""
    from lmms_eval.utils import load_yaml_config

    name = item["task"] if isinstance(item, dict) else item
    entry = tm.task_index.get(name) if isinstance(name, str) else None
    if entry is None:
        return None
    if entry["type"] in ("task", "python_task"):
        config = load_yaml_config(entry["yaml_path"], mode="simple")
        return TaskNode(name, "task", {**config, **item} if isinstance(item, dict) else config, item=item,
                        path=str(entry["yaml_path"]) if isinstance(entry.get("yaml_path"), str) else "")
    subtasks, own = entry.get("task"), {}
    if entry["type"] == "group" and entry.get("yaml_path", -1) != -1:
        own = load_yaml_config(entry["yaml_path"], mode="simple")
        subtasks = own.get("task", [])
    children = [task_node(tm, s) for s in (subtasks if isinstance(subtasks, list) else [])]
    kind = "group" if entry["type"] == "group" else "tag"
    return TaskNode(name, kind, {k: v for k, v in own.items() if k != "task"}, [c for c in children if c], item)


def group_config(tm, name: str) -> dict:
    """A group yaml's own keys with functions imported (its aggregate_metric_list may name some)."""
    from lmms_eval.api.group import GroupConfig
    from lmms_eval.utils import load_yaml_config

    entry = tm.task_index[name]
    if entry.get("yaml_path", -1) == -1:
        return {"group": name}
    full = load_yaml_config(entry["yaml_path"], mode="full")
    return {k: v for k, v in full.items() if k in GroupConfig.__dataclass_fields__ and k != "task"}


def evaluate(lm, tasks: list, *, limit=None, gen_kwargs: str | None = None, bootstrap_iters: int = 100,
             include_defaults: bool = False, seed: int = 0, output_path: str | None = None) -> dict | None:
    """One `simple_evaluate` call (names, override dicts, group dicts); None on ranks != 0.
    `seed` sets lmms-eval's four seeds (python, numpy, torch, few-shot sampling), as `lmms-eval --seed N` does.
    `output_path`: lmms-eval's `--output_path` as task code reads it (`task.args.output_path`: hallusion_bench
    keeps its judgments there)."""
    import torch

    evaluator = import_evaluator()
    lm.task_dict = {}  # datasets of the previous call are not needed any more
    # evalsuite's entry points initialise torch.distributed under torchrun/accelerate launch (evalsuite/dist.py);
    # lmms-eval's "accelerate" backend would build its own non-distributed Accelerator on CPU instead
    backend = "torchrun" if torch.distributed.is_available() and torch.distributed.is_initialized() else "accelerate"
    try:
        return evaluator.simple_evaluate(
            model=lm, model_args=f"pretrained={lm.backend.name}", tasks=list(tasks), limit=limit,
            batch_size=lm.batch_size, log_samples=True, bootstrap_iters=bootstrap_iters,
            gen_kwargs=gen_kwargs or None, task_manager=task_manager(include_defaults),
            verbosity="WARNING", distributed_executor_backend=backend, datetime_str=utc_stamp(),
            random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
            # process_with_media: the documents as without cli_args (lmms-eval's CLI default drops the media)
            **({"cli_args": argparse.Namespace(output_path=output_path, process_with_media=True)} if output_path else {}),
        )
    except Exception as exc:  # process_results and downloads are retried 5x: surface the real cause
        raise unwrap_error(exc) from exc
    finally:
        _route_loguru()  # lazily imported lmms_eval modules may have reset loguru again


def unwrap_error(exc: BaseException) -> BaseException:
    """The exception inside tenacity's RetryError (lmms-eval wraps process_results and downloads)."""
    last = getattr(exc, "last_attempt", None)
    if last is not None and callable(getattr(last, "exception", None)) and last.exception() is not None:
        return last.exception()
    return exc


def utc_stamp() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


# ------------------------------------------------------------------------------------ the model

GEN_KEYS = {"max_new_tokens", "temperature", "top_p", "num_beams", "do_sample", "seed", "until", "suppress_special_tokens"}
MODEL_ARGS = ("pretrained", "batch_size", "device", "dtype", "trust_remote_code")


def gen_config(gen_kwargs: dict) -> tuple[GenConfig, tuple[str, ...]]:
    """lmms-eval generation kwargs -> (evalsuite GenConfig, stop strings). Temperature 0 means greedy."""
    unknown = sorted(set(gen_kwargs) - GEN_KEYS)
    if unknown:
        log.debug("generation kwargs without an evalsuite meaning, ignored: %s", unknown)
    temperature = float(gen_kwargs.get("temperature", 0) or 0)
    do_sample = _as_bool(gen_kwargs.get("do_sample", temperature > 0)) and temperature > 0
    top_p = float(gen_kwargs.get("top_p", 1.0) or 1.0)
    gen = GenConfig(
        max_new_tokens=int(gen_kwargs.get("max_new_tokens", GenConfig.max_new_tokens)),
        do_sample=do_sample, temperature=temperature if do_sample else 1.0, top_p=top_p if do_sample else 1.0,
        num_beams=int(gen_kwargs.get("num_beams", 1) or 1), seed=int(gen_kwargs.get("seed", 0) or 0),
        suppress_special_tokens=_as_bool(gen_kwargs.get("suppress_special_tokens", False)),
    )
    until = gen_kwargs.get("until") or ()
    return gen, (until,) if isinstance(until, str) else tuple(until)


def _as_bool(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "y", "on"}
    return bool(value)


def cut_at_stop(text: str, until: tuple[str, ...]) -> str:
    """The answer up to the first stop string (generation already ended at EOS or max_new_tokens)."""
    for stop in until:
        if stop:
            text = text.split(stop, 1)[0]
    return text


@dataclass
class _Item:
    task: str
    doc_id: int
    request: GenRequest
    key: str


class EvalsuiteLMM(lmms):
    """evalsuite's VLM (or any backend with generate/loglikelihood/fingerprint) as an lmms-eval model."""

    is_simple = True

    def __init__(self, pretrained=None, batch_size=8, device=None, dtype=None, trust_remote_code=False,
                 backend=None, cache_dir=None, dist: Dist | None = None, max_batch_size=None, **unknown):
        super().__init__()
        if unknown:
            raise ValueError(f"model 'evalsuite': unknown model_args {', '.join(sorted(unknown))} "
                             f"(known: {', '.join(MODEL_ARGS)})")
        if max_batch_size is not None:
            log.warning("model 'evalsuite' answers in batches of batch_size=%s; max_batch_size is not used", batch_size)
        dist = dist or Dist.current()
        self._rank, self._world_size = dist.rank, dist.world_size
        if backend is None:  # the `lmms-eval --model evalsuite --model_args pretrained=DIR` route
            if not pretrained:
                raise ValueError("model 'evalsuite' needs model_args pretrained=<checkpoint dir>")
            from evalsuite.models.backend import VLMBackend

            backend = VLMBackend.from_checkpoint(pretrained, device=dist.device(device), dtype=dtype,
                                                 trust_remote_code=_as_bool(trust_remote_code))
        self.backend = backend
        if not str(batch_size).isdigit() or int(batch_size) < 1:
            raise ValueError(f"model 'evalsuite': batch_size={batch_size!r}: expected a positive integer")
        self.batch_size = int(batch_size)
        self.cache_dir = cache_dir
        self._caches: dict[str, ResponseCache] = {}
        # lmms task -> cache namespace (evalsuite/lmms/task.py adds a data fingerprint: other data, other entries)
        self.cache_tags: dict[str, str] = {}
        self.counts = {"generated": 0, "cached": 0}
        self.answered: dict[str, dict] = {}   # answer_counts()

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        """lmms-eval's CLI passes its own --batch_size/--device next to --model_args: model_args win."""
        from lmms_eval.utils import simple_parse_args_string

        args = simple_parse_args_string(arg_string or "")
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in args}
        return cls(**args, **extra)

    @property
    def device(self):
        import torch

        return torch.device(self.backend.device)

    def __repr__(self) -> str:
        # stable across processes, so lmms-eval's own response cache (keyed on repr) can hit too
        return f"EvalsuiteLMM(ckpt={self.backend.fingerprint})"

    def reset_counts(self) -> None:
        self.counts = {"generated": 0, "cached": 0}
        self.answered = {}

    def _note_answers(self, requests: list, items: list[_Item], out: list) -> None:
        """Count, per lmms task, this rank's generate_until answers and the empty ones (cached or new), one
        per request (a doc with several requests, or `repeats`, counts each), and keep the first empty one
        for `answer_counts`. The requests lmms-eval adds only to even out the ranks' work (metadata
        `__padding_only__`: evaluator.py's clones of a rank's last request, task.py's doc 0 on a rank with
        no docs) are not counted: lmms-eval scores only each rank's own docs, so it drops their answers."""
        for req, it, text in zip(requests, items, out):
            if (getattr(req, "metadata", None) or {}).get("__padding_only__"):
                continue
            seen = self.answered.setdefault(it.task, {"total": 0, "empty": 0, "sample": None})
            empty = not str(text or "").strip()
            seen["total"] += 1
            seen["empty"] += empty
            if empty and seen["sample"] is None:
                seen["sample"] = (it.doc_id, it.request.prompt, text)

    def answer_counts(self) -> dict[str, dict]:
        """{lmms task: {"total", "empty", "sample": (doc_id, prompt, answer) of the first empty or None}} of
        the generate_until answers this rank gave since `reset_counts` (evalsuite/lmms/task.py checks them)."""
        return {task: dict(seen) for task, seen in self.answered.items()}

    def _cache(self, task: str) -> ResponseCache | None:
        if self.cache_dir is None:
            return None
        tag = self.cache_tags.get(task, task)
        if tag not in self._caches:
            self._caches[tag] = ResponseCache(self.cache_dir, self.backend.fingerprint, tag, self.rank)
        return self._caches[tag]

    def _item(self, rtype: str, context: str, visual_fn, doc_id: int, task: str, split: str, gen_args) -> _Item:
        doc = self.task_dict[task][split][doc_id]
        visuals = visual_fn(doc) if callable(visual_fn) else visual_fn
        visuals = [v for v in (visuals or []) if v is not None]
        if len(visuals) > 1:
            log.warning("%s doc %s has %d images; evalsuite's VLM wrapper uses the first", task, doc_id, len(visuals))
        if not visuals:
            raise ValueError(f"{task} doc {doc_id}: no image; evalsuite's VLM wrapper answers image+text requests")
        req = GenRequest(key=f"{task}/{doc_id}", image=visuals[0], prompt=context)
        return _Item(task, doc_id, req, request_key(self.backend.fingerprint, task, rtype, doc_id, context, gen_args))

    def _lookup(self, items: list[_Item], out: list) -> list[int]:
        todo = []
        for i, it in enumerate(items):
            cache = self._cache(it.task)
            hit = cache.get(it.key) if cache is not None else None
            if hit is None:
                todo.append(i)
            else:
                out[i] = hit
        self.counts["cached"] += len(items) - len(todo)
        return todo

    def _persist(self, items: list[_Item], idxs: list[int], out: list, rtype: str) -> None:
        by_task: dict[str, list] = {}
        for i in idxs:
            by_task.setdefault(items[i].task, []).append((items[i].key, items[i].doc_id, rtype, out[i]))
        for task, records in by_task.items():
            cache = self._cache(task)
            if cache is not None:
                cache.put_many(records)
        self.counts["generated"] += len(idxs)

    def generate_until(self, requests) -> list[str]:
        from evalsuite.progress import progress_bar

        requests = list(requests)  # read twice: here and by _note_answers
        items, configs = [], []
        for req in requests:
            context, gen_kwargs, visual_fn, doc_id, task, split = req.args
            gen, until = gen_config(dict(gen_kwargs))
            configs.append((gen, until))
            gen_args = {**gen.to_dict(), "until": list(until)}
            items.append(self._item("generate_until", context, visual_fn, doc_id, task, split, gen_args))
        out: list = [None] * len(items)
        groups: dict[tuple, list[int]] = {}
        for i in self._lookup(items, out):
            groups.setdefault(configs[i], []).append(i)
        todo = sum(len(g) for g in groups.values())
        with progress_bar(total=todo, desc="evalsuite generate", disable=self.rank != 0 or todo == 0) as bar:
            for (gen, until), idxs in groups.items():
                for start in range(0, len(idxs), self.batch_size):
                    chunk = idxs[start:start + self.batch_size]
                    texts = self.backend.generate([items[i].request for i in chunk], gen)
                    if len(texts) != len(chunk):
                        raise RuntimeError(f"backend returned {len(texts)} answers for {len(chunk)} requests")
                    for i, text in zip(chunk, texts):
                        out[i] = cut_at_stop(text, until)
                    self._persist(items, chunk, out, "generate_until")
                    bar.update(len(chunk))
        self._note_answers(requests, items, out)
        return out

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        items, conts = [], []
        for req in requests:
            context, target, visual_fn, doc_id, task, split = req.args
            cont = target if isinstance(target, str) else target(self.task_dict[task][split][doc_id])
            conts.append(cont)
            items.append(self._item("loglikelihood", context, visual_fn, doc_id, task, split, {"continuation": cont}))
        out: list = [None] * len(items)
        todo = self._lookup(items, out)
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start:start + self.batch_size]
            scores = self.backend.loglikelihood([(items[i].request, conts[i]) for i in chunk])
            for i, (logp, greedy) in zip(chunk, scores):
                out[i] = [float(logp), bool(greedy)]
            self._persist(items, chunk, out, "loglikelihood")
        return [(float(lp), bool(g)) for lp, g in out]

    def generate_until_multi_round(self, requests) -> list[tuple[str, ...]]:
        """Rounds per doc: the task's `doc_to_text_partial` sees the answers so far and says when to stop."""
        out = []
        for req in requests:
            context, gen_kwargs, visual_fn, text_fn, doc_id, task, split = req.args
            doc = self.task_dict[task][split][doc_id]
            gen, until = gen_config(dict(gen_kwargs))
            visuals, answers, info, round_idx = visual_fn(doc), [], None, 0
            while True:
                image = next(iter(visuals or []), None)
                text = self.backend.generate([GenRequest(f"{task}/{doc_id}", image, context)], gen)[0]
                answers.append(cut_at_stop(text, until))
                round_idx += 1
                new_visuals, context, done, answers, info = text_fn(
                    doc, previous_output=list(answers), round_idx=round_idx, previous_round_info=info,
                )
                visuals = new_visuals or visuals
                answers = list(answers)
                if done:
                    break
            self.counts["generated"] += 1
            out.append(tuple(answers))
        return out


def make_model(backend, batch_size: int = 8, cache_root: str | os.PathLike | None = None,
               dist: Dist | None = None) -> EvalsuiteLMM:
    """An lmms-eval model answering with `backend` (and resuming from `cache_root`)."""
    return EvalsuiteLMM(backend=backend, batch_size=batch_size, cache_dir=cache_root, dist=dist)


def manifests():
    """Entry point `lmms_eval.models`: `--model evalsuite` resolves to EvalsuiteLMM."""
    from lmms_eval.models.registry_v2 import ModelManifest

    return [ModelManifest(model_id=MODEL_ID, simple_class_path=f"{__name__}.EvalsuiteLMM")]
