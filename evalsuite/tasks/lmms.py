"""The bridge `evalsuite run` calls for every task name that is not evalsuite's own: lmms-eval tasks.

    results = run_lmms_tasks(["mme", "pope"], data_root=W, cache_root=R, backend=B)   # -> [TaskResult, ...]

Order of work (all checks before the model is loaded, so a typo costs seconds, not a model load):
1. resolve each name: evalsuite's local-data tasks (mme -> evalsuite_mme, ...) or any lmms-eval task;
2. resolve its data: `data[name]` (the eval config's lmms.data: file(s), imagefolder, save_to_disk dir,
   hub snapshot), else for the local tasks the world at `data_root/questions/`, else lmms-eval's hub
   dataset if it is already in the local HF cache. Anything else is a UserError naming the task and the option;
3. one `simple_evaluate` per task (resume granularity), through a model that caches every finished
   batch (`evalsuite.models.cache`), so a rerun after a crash regenerates only the missing samples.

On data-parallel runs (torchrun / accelerate launch) every rank calls this; only rank 0 gets results,
the other ranks get []. Scores are lmms-eval's own, converted to MetricValue without recomputation.
Everything comes in as arguments (evalsuite.run.run_eval passes the typed `lmms:` section of its config).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from evalsuite.errors import RunFailure, UserError
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


def _local_spec(name: str, data_opt, data_root, split: str) -> LmmsSpec:
    lmms_task = LOCAL_TASKS[name]
    if data_opt is not None:
        override = data_override(name, data_opt, split="test")
    else:
        files = world_files(lmms_task, data_root, split, name)
        override = data_override(name, [str(f) for f in files], split="test")
    desc = override.get("dataset_kwargs", {}).get("data_files") or override["dataset_path"]
    return LmmsSpec(name, lmms_task, {"task": lmms_task, **override}, data=str(desc))


def resolve_specs(names: list[str], data: dict | None = None, data_root=None, split: str = "val",
                  limit: int | None = None) -> list[LmmsSpec]:
    """Validate every name and its data (`data`: task -> local file(s)/dir, else the world at
    `data_root/questions/` of `split`); lmms-eval's task index is read only if a non-local name needs it."""
    from evalsuite.adapters import lmms_eval as adapter

    data_opts = data or {}
    specs = [_local_spec(n, data_opts.get(n), data_root, split) for n in names if n in LOCAL_TASKS]
    others = [n for n in names if n not in LOCAL_TASKS]
    if others:
        tm = adapter.task_manager(include_defaults=True)
        for name in others:
            specs.append(_builtin_spec(adapter, tm, name, data_opts.get(name)))
    order = {n: i for i, n in enumerate(names)}
    specs.sort(key=lambda s: order[s.name])
    if limit is not None:
        for spec in specs:
            if spec.lmms_task in PAIRED_TASKS and limit % 2:
                raise UserError(f"--limit {limit}: {spec.name} scores question pairs (2 per image); "
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


def run_lmms_tasks(names: list[str], *, backend, cache_root, data: dict | None = None, data_root=None,
                   split: str = "val", gen_kwargs: str | None = None, bootstrap_iters: int = 100,
                   limit: int | None = None, batch_size: int = 8,
                   specs: list[LmmsSpec] | None = None) -> list[TaskResult]:
    """Run lmms-eval tasks with `backend` (anything with generate/loglikelihood/fingerprint, or a
    zero-argument callable returning one: called only once every task's data is found).

    data/data_root/split: where the documents come from (see resolve_specs; `specs` = already resolved);
    gen_kwargs: lmms-eval's 'k=v,...' generation overrides; cache_root: the per-sample response cache."""
    from evalsuite.adapters import lmms_eval as adapter

    specs = specs if specs is not None else resolve_specs(names, data, data_root, split, limit)
    if callable(backend) and not hasattr(backend, "generate"):
        backend = backend()
    lm = adapter.make_model(backend, batch_size=batch_size, cache_root=cache_root)
    results = []
    for spec in specs:
        lm.reset_counts()
        log.info("lmms-eval task %s (%s) on %s", spec.name, spec.lmms_task, spec.data)
        task = dict(spec.task) if isinstance(spec.task, dict) else spec.task
        lm.cache_tags[spec.lmms_task] = f"{spec.lmms_task}.{data_fingerprint(spec.task)}"
        try:
            raw = adapter.evaluate_task(
                lm, task, limit=limit, gen_kwargs=gen_kwargs, include_defaults=spec.builtin,
                bootstrap_iters=bootstrap_iters,
            )
        except UserError:
            raise
        except Exception as exc:
            raise LmmsRunError(
                f"{spec.name}: lmms-eval run failed ({type(exc).__name__}: {exc}); {lm.counts['generated']} "
                f"newly finished samples are kept in {cache_root} and will not be regenerated"
            ) from exc
        if raw is not None:  # None on ranks != 0
            results.extend(to_task_results(spec, raw, dict(lm.counts), gen_kwargs, limit))
    return results


def to_task_results(spec: LmmsSpec, raw: dict, counts: dict, gen_kwargs, limit) -> list[TaskResult]:
    """lmms-eval's results dict -> one TaskResult per leaf task (a group gives several)."""
    from evalsuite.version import lmms_eval_version

    out = []
    leaves = [t for t in raw["results"] if t in raw.get("samples", {})]
    for leaf in leaves:
        metrics, stderr_clt = _metrics(raw, leaf)
        name = spec.name if leaves == [spec.lmms_task] or len(leaves) == 1 else f"{spec.name}/{leaf}"
        n = raw.get("n-samples", {}).get(leaf, {})
        out.append(TaskResult(
            task=name, version=_task_version(raw, leaf), metrics=metrics,
            samples=_samples(name, raw["samples"][leaf], metrics),
            config={"lmms_task": leaf, "data": spec.data, "limit": limit, "gen_kwargs": gen_kwargs},
            extra={"lmms_eval_version": lmms_eval_version(), "lmms_task": leaf,
                   "task_version": _task_version(raw, leaf), "n_samples": n,
                   "stderr_clt": stderr_clt, "responses": counts},
        ))
    return out


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


def _samples(name: str, rows: list[dict], metrics: list[MetricValue]) -> list[dict]:
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
        rec.update({k: v for k, v in row.items() if k in names})
        out.append(rec)
    return out
