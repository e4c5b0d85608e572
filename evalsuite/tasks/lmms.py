"""The bridge `evalsuite run` calls for every task name that is not evalsuite's own: lmms-eval tasks.

    results = run_lmms_tasks(ctx, ["mme", "pope"])      # -> [TaskResult, ...]

Order of work (all checks before the model is loaded, so a typo costs seconds, not a model load):
1. resolve each name: evalsuite's local-data tasks (mme -> evalsuite_mme, ...) or any lmms-eval task;
2. resolve its data: `ctx.options["data"][name]` (file(s), imagefolder, save_to_disk dir, hub snapshot),
   else for the local tasks the world at `ctx.data_root/questions/`, else lmms-eval's hub dataset if it
   is already in the local HF cache. Anything else is a UserError naming the task and the option;
3. one `simple_evaluate` per task (resume granularity), through a model that caches every finished
   batch (`evalsuite.models.cache`), so a rerun after a crash regenerates only the missing samples.

On data-parallel runs (torchrun / accelerate launch) every rank calls this; only rank 0 gets results,
the other ranks get []. Scores are lmms-eval's own, converted to MetricValue without recomputation.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.errors import RunFailure, UserError
from evalsuite.tasks.base import RunContext
from evalsuite.adapters.lmms_data import check_hub_cached, data_fingerprint, data_override, world_files
from evalsuite.tasks.registry import LMMS_LOCAL_TASKS
from evalsuite.types import MetricValue, TaskResult

log = logging.getLogger(__name__)

# besides registry.LMMS_LOCAL_TASKS: the per-sampling POPE sets (built-in names -> evalsuite's)
LOCAL_TASKS = {
    **LMMS_LOCAL_TASKS,
    "pope_random": "evalsuite_pope_random",
    "pope_pop": "evalsuite_pope_popular",
    "pope_adv": "evalsuite_pope_adversarial",
}
PAIRED_TASKS = {"evalsuite_mme"}   # scored per question pair: a --limit must keep pairs whole


@dataclass
class LmmsSpec:
    name: str                       # as the user wrote it
    lmms_task: str                  # the lmms-eval task that runs
    task: dict | str = ""           # what simple_evaluate gets: a dict override or the bare name
    data: str = ""                  # where the docs come from, for run.json
    builtin: bool = False           # needs lmms-eval's own task index (~10 s to build)
    extra: dict = field(default_factory=dict)


class LmmsRunError(RunFailure):
    """An lmms-eval task failed while running (model or scoring); finished samples stay cached."""


def is_main_process() -> bool:
    return int(os.environ.get("RANK", 0)) == 0


def validate_task_names(names: list[str], known_own: list[str] | None = None) -> None:
    """UserError for a name that is neither local nor an lmms-eval task/group/tag (data not checked yet)."""
    from evalsuite.adapters import lmms_eval as adapter

    others = [n for n in names if n not in LOCAL_TASKS]
    if not others:
        return
    tm = adapter.task_manager(include_defaults=True)
    unknown = [n for n in others if not adapter.leaf_task_configs(tm, n)]
    if unknown:
        own = ", ".join(sorted(set(known_own or []) | set(LOCAL_TASKS)))
        raise UserError(f"--tasks {','.join(unknown)}: unknown task (not an evalsuite task ({own}) nor an "
                        "lmms-eval task, group or tag)")


def _local_spec(ctx: RunContext, name: str, data_opt) -> LmmsSpec:
    lmms_task = LOCAL_TASKS[name]
    if data_opt is not None:
        override = data_override(name, data_opt, split="test")
    else:
        files = world_files(lmms_task, ctx.data_root, ctx.options.get("split", "val"), name)
        override = data_override(name, [str(f) for f in files], split="test")
    desc = override.get("dataset_kwargs", {}).get("data_files") or override["dataset_path"]
    return LmmsSpec(name, lmms_task, {"task": lmms_task, **override}, data=str(desc))


def resolve_specs(ctx: RunContext, names: list[str]) -> list[LmmsSpec]:
    """Validate every name and its data; lmms-eval's task index is read only if a non-local name needs it."""
    from evalsuite.adapters import lmms_eval as adapter

    data_opts = ctx.options.get("data") or {}
    specs = [_local_spec(ctx, n, data_opts.get(n)) for n in names if n in LOCAL_TASKS]
    others = [n for n in names if n not in LOCAL_TASKS]
    if others:
        tm = adapter.task_manager(include_defaults=True)
        for name in others:
            specs.append(_builtin_spec(adapter, tm, name, data_opts.get(name)))
    order = {n: i for i, n in enumerate(names)}
    specs.sort(key=lambda s: order[s.name])
    if ctx.limit is not None:
        for spec in specs:
            if spec.lmms_task in PAIRED_TASKS and ctx.limit % 2:
                raise UserError(f"--limit {ctx.limit}: {spec.name} scores question pairs (2 per image); "
                                "use an even limit")
    return specs


def _builtin_spec(adapter, tm, name: str, data_opt) -> LmmsSpec:
    leaves = adapter.leaf_task_configs(tm, name)
    if not leaves:
        raise UserError(f"--tasks {name}: unknown task (neither an evalsuite task nor an lmms-eval task, "
                        "group or tag; `evalsuite tasks` lists evalsuite's)")
    if data_opt is not None:
        if len(leaves) != 1:
            raise UserError(f"data.{name}: {name} is a group of {len(leaves)} tasks; map each task's data "
                            f"separately ({', '.join(sorted(leaves))})")
        cfg = next(iter(leaves.values()))
        override = data_override(name, data_opt, split=cfg.get("test_split") or cfg.get("validation_split"),
                                 dataset_name=cfg.get("dataset_name"))
        return LmmsSpec(name, name, {"task": name, **override}, data=str(data_opt), builtin=True)
    for leaf, cfg in leaves.items():
        check_hub_cached(name, leaf, cfg)
    return LmmsSpec(name, name, name, data=", ".join(str(c.get("dataset_path")) for c in leaves.values()),
                    builtin=True)


def _gen_kwargs_arg(ctx: RunContext) -> str | None:
    gk = ctx.options.get("gen_kwargs")
    if isinstance(gk, dict):
        return ",".join(f"{k}={v}" for k, v in gk.items()) or None
    return gk or None


def run_lmms_tasks(ctx: RunContext, names: list[str], backend=None) -> list[TaskResult]:
    """Run lmms-eval tasks on `ctx.ckpt` (or `backend`: anything with generate/loglikelihood/fingerprint)."""
    from evalsuite.adapters import lmms_eval as adapter

    specs = resolve_specs(ctx, names)
    if backend is None:
        backend = _checkpoint_backend(ctx)
    cache_root = ctx.options.get("resume_dir") or Path(ctx.output_dir) / ".resume" / "lmms"
    lm = adapter.make_model(backend, batch_size=ctx.batch_size, cache_root=cache_root)
    gen_kwargs = _gen_kwargs_arg(ctx)
    results = []
    for spec in specs:
        lm.reset_counts()
        log.info("lmms-eval task %s (%s) on %s", spec.name, spec.lmms_task, spec.data)
        task = dict(spec.task) if isinstance(spec.task, dict) else spec.task
        lm.cache_tags[spec.lmms_task] = f"{spec.lmms_task}.{data_fingerprint(spec.task)}"
        try:
            raw = adapter.evaluate_task(
                lm, task, limit=ctx.limit, gen_kwargs=gen_kwargs, include_defaults=spec.builtin,
                bootstrap_iters=int(ctx.options.get("bootstrap_iters", 100)),
            )
        except UserError:
            raise
        except Exception as exc:
            raise LmmsRunError(
                f"{spec.name}: lmms-eval run failed ({type(exc).__name__}: {exc}); {lm.counts['generated']} "
                f"newly finished samples are kept in {cache_root} and will not be regenerated"
            ) from exc
        if raw is not None:  # None on ranks != 0
            results.extend(to_task_results(spec, raw, dict(lm.counts), gen_kwargs, ctx.limit,
                                           getattr(backend, "prompt_text", None)))
    return results


def _checkpoint_backend(ctx: RunContext):
    from evalsuite.adapters.lmms_eval import VLMBackend
    from evalsuite.manifest import checkpoint_hash

    if ctx.device is None and int(os.environ.get("WORLD_SIZE", 1)) > 1:
        import torch

        if torch.cuda.is_available():  # data parallel: each rank its own GPU
            ctx.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    suffix = ctx.inputs.cache_suffix() if ctx.inputs is not None else ""
    return VLMBackend(ctx.vlm, checkpoint_hash(ctx.ckpt) + suffix, name=str(ctx.ckpt))


def to_task_results(spec: LmmsSpec, raw: dict, counts: dict, gen_kwargs, limit, prompt_text=None) -> list[TaskResult]:
    """lmms-eval's results dict -> one TaskResult per leaf task (a group gives several).
    `prompt_text(context, with_image)`: the text the model received for a context (recorded per sample)."""
    from evalsuite.version import lmms_eval_version

    out = []
    leaves = [t for t in raw["results"] if t in raw.get("samples", {})]
    for leaf in leaves:
        metrics, stderr_clt = _metrics(raw, leaf)
        name = spec.name if leaves == [spec.lmms_task] or len(leaves) == 1 else f"{spec.name}/{leaf}"
        n = raw.get("n-samples", {}).get(leaf, {})
        out.append(TaskResult(
            task=name, version=_task_version(raw, leaf), metrics=metrics,
            samples=_samples(name, raw["samples"][leaf], metrics, prompt_text),
            config={"lmms_task": leaf, "data": spec.data, "limit": limit, "gen_kwargs": gen_kwargs},
            extra={"lmms_eval_version": lmms_eval_version(), "lmms_task": leaf,
                   "task_version": _task_version(raw, leaf), "n_samples": n,
                   "stderr_clt": stderr_clt, "responses": counts},
        ))
    return out


def _has_image(doc: dict) -> bool:
    """Whether a (logged) lmms-eval doc came with an image: its image column or evalsuite's image_source."""
    return any(doc.get(k) is not None for k in ("image", "image_source", "images"))


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _metrics(raw: dict, task: str) -> tuple[list[MetricValue], dict]:
    """MetricValues from lmms-eval's "metric,filter" keys. `stderr` is lmms-eval's (bootstrap) stderr
    only: its `_stderr_clt` is computed over per-sample scores, which for aggregated totals such as
    MME's (sum over categories) is not in the metric's units, so it goes to `extra` instead."""
    res, hib = raw["results"][task], raw.get("higher_is_better", {}).get(task, {})
    n = raw.get("n-samples", {}).get(task, {}).get("effective")
    metrics, clt = [], {}
    for key, value in res.items():
        metric, sep, filt = key.partition(",")
        if not sep or "_stderr" in metric or _number(value) is None:
            continue
        if _number(res.get(f"{metric}_stderr_clt,{filt}")) is not None:
            clt[metric] = _number(res[f"{metric}_stderr_clt,{filt}"])
        metrics.append(MetricValue(metric=metric, value=float(value), higher_is_better=bool(hib.get(metric, True)),
                                   n=n, stderr=_number(res.get(f"{metric}_stderr,{filt}")),
                                   variant=None if filt == "none" else filt))
    return metrics, clt


def _task_version(raw: dict, task: str) -> str:
    """The yaml's `metadata: [{version: ...}]` (lmms-eval itself reports "Yaml" for the list form)."""
    meta = raw.get("configs", {}).get(task, {}).get("metadata")
    for entry in meta if isinstance(meta, list) else [meta]:
        if isinstance(entry, dict) and "version" in entry:
            return str(entry["version"])
    return str(raw["versions"].get(task))


def _samples(name: str, rows: list[dict], metrics: list[MetricValue], prompt_text=None) -> list[dict]:
    names = {m.metric for m in metrics}
    out = []
    for row in sorted(rows, key=lambda r: r["doc_id"]):
        doc = row.get("doc") or {}
        args = row.get("arguments") or [[None]]
        prompt = args[0][0] if isinstance(args[0], (list, tuple)) else args[0]
        answer = row.get("filtered_resps") or row.get("resps") or [None]
        while isinstance(answer, list) and answer:
            answer = answer[0]
        rec = {"key": f"{name}/{row['doc_id']}", "doc_id": row["doc_id"],
               "image_id": doc.get("question_id", doc.get("image_id")), "image": doc.get("image_source"),
               "prompt": prompt, "answer": answer, "target": row.get("target"), "doc": doc}
        if prompt_text is not None and isinstance(prompt, str):
            rec["prompt_text"] = prompt_text(prompt, _has_image(doc))
        rec.update({k: v for k, v in row.items() if k in names})
        out.append(rec)
    return out
