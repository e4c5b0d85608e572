"""The body of evalsuite's lmms-eval model, free of lmms_eval imports.

`evalsuite.adapters.lmms_eval.EvalsuiteLMM` is `type("EvalsuiteLMM", (LMMCore, lmms), ...)`, built on
first access, so that module stays the only one importing lmms_eval and this one stays testable.

lmms-eval sends ALL requests of one type in one call and expects answers in the same order. LMMCore
looks every request up in the per-sample response cache, groups the rest by generation config, answers
them in batches and persists each batch before starting the next: a crash keeps what was finished.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from evalsuite.models.cache import ResponseCache, request_key
from evalsuite.types import GenConfig, GenRequest

log = logging.getLogger(__name__)

GEN_KEYS = {"max_new_tokens", "temperature", "top_p", "num_beams", "do_sample", "seed", "until"}


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


class LMMCore:
    """evalsuite's VLM (or any backend with generate/loglikelihood) behind lmms-eval's model API."""

    is_simple = True

    def __init__(self, pretrained=None, batch_size=8, device=None, dtype=None, trust_remote_code=False,
                 backend=None, cache_dir=None, **ignored):
        super().__init__()
        if ignored:
            log.debug("EvalsuiteLMM ignores model args %s", sorted(ignored))
        self._rank = int(os.environ.get("RANK", 0))
        self._world_size = int(os.environ.get("WORLD_SIZE", 1))
        if backend is None:
            backend = self._backend_from_args(pretrained, device, dtype, trust_remote_code)
        self.backend = backend
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else 8
        self.cache_dir = cache_dir
        self._caches: dict[str, ResponseCache] = {}
        # lmms task -> cache namespace (the bridge adds a data fingerprint: another world, other entries)
        self.cache_tags: dict[str, str] = {}
        self.counts = {"generated": 0, "cached": 0}

    def _backend_from_args(self, pretrained, device, dtype, trust_remote_code):
        # the `--model evalsuite --model_args pretrained=DIR` route (lmms-eval's own CLI)
        from evalsuite.adapters.lmms_eval import VLMBackend

        if not pretrained:
            raise ValueError("model 'evalsuite' needs model_args pretrained=<checkpoint dir>")
        if device is None and self._world_size > 1:
            import torch

            if torch.cuda.is_available():  # data parallel: one replica per local GPU
                device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        return VLMBackend.from_checkpoint(pretrained, device=device, dtype=dtype,
                                          trust_remote_code=_as_bool(trust_remote_code))

    @property
    def device(self):
        import torch

        return torch.device(self.backend.device)

    def __repr__(self) -> str:
        # stable across processes, so lmms-eval's own response cache (keyed on repr) can hit too (G9)
        return f"EvalsuiteLMM(ckpt={self.backend.fingerprint})"

    def reset_counts(self) -> None:
        self.counts = {"generated": 0, "cached": 0}

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
        from tqdm.auto import tqdm

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
        with tqdm(total=todo, desc="evalsuite generate", disable=self.rank != 0 or todo == 0) as bar:
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
