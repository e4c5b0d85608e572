"""lmms-eval's results dict -> evalsuite TaskResults, and lmms-eval's own results layout on disk.

No lmms_eval import: `raw` is what `simple_evaluate(..., log_samples=True)` returned.

- one TaskResult per leaf task (a group's leaves as `NAME/LEAF`), plus one for each group that lmms-eval
  aggregated (its `aggregate_metric_list`), named `NAME` (or `NAME/SUBGROUP`);
- POPE and MME leaves get their declared metric specs (`evalsuite.lmms.metrics`): per-sample
  values, directions, and the rows lmms-eval does not report (POPE's model_yes_ratio and per-setting rows);
- `config` carries what a table needs to say where a number came from: `data_source`, `limit`, `n`
  (documents scored) and `n_total` (documents in the data); `identity` what changes the number.
"""
from __future__ import annotations

from pathlib import Path

from evalsuite.types import MetricValue, TaskResult

# the keys of lmms-eval's results dict that hold one entry per task (or group)
LAYOUT_KEYS = ("results", "groups", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better",
               "n-samples")


def leaf_identity(lmms_task: str, data_id, *, limit: int | None, gen_kwargs: str | dict | None,
                  inputs: dict | None, setup: dict, judge: dict | None = None) -> dict:
    """What changes a leaf's numbers besides the checkpoint: its data (content fingerprint), the limit,
    the generation overrides (a typed dict, whatever order they were typed in: identity.gen_identity),
    non-default prompt settings (`inputs`; {} adds no key, so default runs keep their keys), and `setup` =
    {"seed", "device", "dtype"}; `judge`: a judged task's judge (evalsuite/lmms/judged.py). Computed before the run too (evalsuite/run.py reuses a stored result of
    the same identity), so both sides build it here."""
    from evalsuite.identity import gen_identity
    from evalsuite.run_config import parse_gen_kwargs

    gen = parse_gen_kwargs(gen_kwargs) if gen_kwargs is not None else None  # typed, order-free
    return {"lmms_task": lmms_task, "data": data_id, "limit": limit, "gen_kwargs": gen_identity(gen),
            **({"inputs": inputs} if inputs else {}), **setup, **({"judge": judge} if judge else {})}


def config_version(config: dict) -> str | None:
    """A task yaml's `metadata: [{version: ...}]` (or `{version: ...}`), as the results record it."""
    meta = config.get("metadata")
    for entry in meta if isinstance(meta, list) else [meta]:
        if isinstance(entry, dict) and "version" in entry:
            return str(entry["version"])
    return None


def to_task_results(spec, raw: dict, counts: dict, *, gen_kwargs: str | None, limit: int | None,
                    bootstrap_iters: int, backend=None, setup: dict | None = None) -> list[TaskResult]:
    """One TaskResult per leaf of `spec` (an LmmsSpec) in lmms-eval's order, then the aggregated groups.
    `backend`: where it has them, `prompt_text(context, with_image)` (recorded per sample) and
    `inputs_identity` (non-default prompt settings, part of every leaf's identity). `setup`: seed, device
    type and dtype of the run (`leaf_identity`)."""
    from evalsuite.lmms.metrics import declare
    from evalsuite.version import lmms_eval_version

    version = lmms_eval_version()
    out = []
    for task in [t for t in raw["results"] if t in raw.get("samples", {})]:
        leaf = spec.leaf(task)
        name = leaf.name if leaf else f"{spec.name}/{task}"
        metrics, stderr_clt = _metrics(raw, task)
        n = raw.get("n-samples", {}).get(task, {})
        task_version = _task_version(raw, task)
        out.append(declare(TaskResult(
            task=name, version=task_version, metrics=metrics,
            samples=_samples(name, raw["samples"][task], metrics, getattr(backend, "prompt_text", None)),
            config={"lmms_task": task, "group": spec.lmms_name if spec.kind != "task" else None,
                    "data_source": leaf.source if leaf else None, "limit": limit, "n": n.get("effective"),
                    "n_total": n.get("original"), "gen_kwargs": gen_kwargs, "bootstrap_iters": bootstrap_iters},
            extra={"lmms_eval_version": version, "lmms_task": task, "task_version": task_version, "n_samples": n,
                   "stderr_clt": stderr_clt, "responses": counts},
            identity=leaf_identity(task, leaf.data_id if leaf else None, limit=limit, gen_kwargs=gen_kwargs,
                                   inputs=getattr(backend, "inputs_identity", None), setup=setup or {},
                                   judge=leaf.judge if leaf else None),
        )))
    leaves = {r.config["lmms_task"]: r for r in out}
    for group in _aggregated_groups(raw):
        members = [leaves[t] for t in _leaf_tasks(raw, group) if t in leaves]
        metrics, _ = _metrics(raw, group, n=sum(r.config["n"] or 0 for r in members))
        name = spec.name if group == spec.lmms_name else f"{spec.name}/{group}"
        out.append(TaskResult(
            task=name, version=_task_version(raw, group), metrics=metrics,
            config={"lmms_task": group, "group": group, "data_source": "; ".join(
                        r.config["data_source"] or "" for r in members), "limit": limit,
                    "n": sum(r.config["n"] or 0 for r in members), "n_total": None, "gen_kwargs": gen_kwargs,
                    "bootstrap_iters": bootstrap_iters, "members": [r.task for r in members]},
            extra={"lmms_eval_version": version, "lmms_task": group, "responses": counts},
            identity={"lmms_task": group, "members": sorted((r.task, r.eval_key) for r in members)},
        ))
    return out


def _aggregated_groups(raw: dict) -> list[str]:
    """Groups whose results hold numbers (lmms-eval aggregates only groups with aggregate_metric_list)."""
    return [g for g, subs in raw.get("group_subtasks", {}).items() if subs and g not in raw.get("samples", {})
            and any(_number(v) is not None for k, v in raw["results"].get(g, {}).items() if "," in k)]


def _leaf_tasks(raw: dict, group: str) -> list[str]:
    subs = raw.get("group_subtasks", {})
    return [leaf for t in subs.get(group, []) for leaf in (_leaf_tasks(raw, t) if subs.get(t) else [t])]


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _metrics(raw: dict, task: str, n: int | None = None) -> tuple[list[MetricValue], dict]:
    """MetricValues from lmms-eval's "metric,filter" keys. `stderr` is lmms-eval's (bootstrap) stderr
    only: its `_stderr_clt` is computed over per-sample scores, which for aggregated totals such as
    MME's (sum over categories) is not in the metric's units, so it goes to `extra` instead."""
    res, hib = raw["results"][task], raw.get("higher_is_better", {}).get(task, {})
    if n is None:
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
    version = config_version(raw.get("configs", {}).get(task, {}))
    return version if version is not None else str(raw.get("versions", {}).get(task))


def _has_image(doc: dict) -> bool:
    """Whether a (logged) lmms-eval doc came with an image: its image column or evalsuite's image_source."""
    return any(doc.get(k) is not None for k in ("image", "image_source", "images"))


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
        if prompt_text is not None and isinstance(prompt, str):  # the text the model actually received
            rec["prompt_text"] = prompt_text(prompt, _has_image(doc))
        rec.update({k: v for k, v in row.items() if k in names})
        out.append(rec)
    return out


def merge_layout(layout: dict, raw: dict, path: Path) -> None:
    """Add one `simple_evaluate` result to `layout` (lmms-eval's results json: per-task `results`
    {"metric,filter": value, "metric_stderr,filter": ...}, `configs`, `versions`, `n-samples`, ...,
    without the samples) and rewrite `path` with it, atomically."""
    from evalsuite.files import write_json_atomic

    for key in LAYOUT_KEYS:
        if key in raw:
            layout.setdefault(key, {}).update(raw[key])
    for key in ("config", "lmms_eval_version", "date"):
        if key in raw:
            layout[key] = raw[key]
    write_json_atomic(path, layout)
