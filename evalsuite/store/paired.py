"""Statistics from per-sample values, shared by `evalsuite table` and the report so they always agree.

`with_sample_stats(tidy, records_of)` takes `build_table`'s rows and the records of the runs they came
from, and
  * gives a row without a CI one from a bootstrap over the per-sample values its run stored
    (`sample["values"][metric]`, filled by the task's declared `MetricSpec`s,
    `evalsuite.tasks.metric_spec`; a subset row, such as POPE's per-setting accuracy, over its subset's);
  * replaces the delta CI by a paired bootstrap (`metrics.stats.paired_delta_ci`) where both checkpoints'
    records of the same eval_key cover the same units; other deltas keep the MOVER interval of the two
    CIs (`delta_method` "independent") or have none ("");
  * says for every row whether it had per-sample values (`per_sample`): "stored", "none declared" (the
    metric has no per-sample form, a median), or "missing" (declared, but the records carry none: a run
    written before values were stored, or a samples file that could not be read), so a row never loses
    its sample CI or paired delta silently;
  * adds `significant` (the delta CI excludes 0; None without a CI); `direction` is the declared one
    (`build_table`).
Nothing is re-derived from record fields: the values are the ones the run computed its numbers from.
Bootstraps are seeded (`seed`) and sized (`n_boot`); the resample counts of one sample size are drawn
once and shared by every metric of that size.
"""
from __future__ import annotations

import functools

from evalsuite.store.table import _num
from evalsuite.tasks import metric_spec as ms

EXTRA_COLUMNS = ["direction", "ci_source", "delta_method", "n_paired", "significant", "per_sample"]
# what the statistics read of a record (metric_spec.units, sample_key): all a table needs of a run's records
STAT_FIELDS = ("key", "image_id", ms.VALUES, ms.UNIT, ms.STRATUM, ms.SUBSET)


def group_records(records: list[dict]) -> dict:
    """{(run_id, task): [records]} from store records (`Store.sample_records`), in their order."""
    out: dict = {}
    for r in records:
        out.setdefault((r["run_id"], r["task"]), []).append(r)
    return out


def sample_runs(tidy) -> set[str]:
    """The runs whose records `with_sample_stats` reads: those with a metric that has a per-sample form
    (or that declared nothing: a run written before metric specs, whose rows are then marked missing)."""
    specs = tidy.attrs.get("metric_specs") or {}
    keep = [(specs.get((run, task)) or {}).get(m, {}).get("per_sample", True)
            for run, task, m in zip(tidy["run_id"], tidy["task"], tidy["metric"])]
    return set(tidy.loc[keep, "run_id"])


def _counts(n: int, n_boot: int, seed: int, strata) -> tuple:
    return _cached_counts(n, n_boot, seed, None if strata is None else tuple(strata.tolist()))


@functools.lru_cache(maxsize=6)
def _cached_counts(n: int, n_boot: int, seed: int, strata: tuple | None) -> tuple:
    """One draw of resample counts per sample size (and strata), shared by every metric of that size."""
    import numpy as np

    from evalsuite.metrics.stats import resample_counts

    chunks = tuple(resample_counts(n, n_boot, seed, strata))
    # small samples (thousands of small runs): one (n_boot, n) matrix, one product per metric; the same draws
    return (np.concatenate(chunks),) if n * n_boot <= 4_000_000 else chunks


class _Units:
    """Per-run, per-metric sample units, read once from the stored values."""

    def __init__(self, records_of: dict):
        self.records_of, self.cache = records_of, {}

    def get(self, run_id, task, metric, subset=None) -> dict:
        k = (run_id, task, metric, subset)
        if k not in self.cache:
            self.cache[k] = ms.units(self.records_of.get((run_id, task)) or [], metric, subset)
        return self.cache[k]


def _spec(r, specs_of: dict) -> dict:
    return (specs_of.get((r["run_id"], r["task"])) or {}).get(r["metric"]) or {}


def _subset(r, units: _Units) -> str | None:
    """The subset a row is restricted to: a variant that names a subset of its run's samples."""
    v = r["variant"]
    if not isinstance(v, str) or not v:
        return None
    recs = units.records_of.get((r["run_id"], r["task"])) or []
    return v if any(x.get(ms.SUBSET) == v for x in recs) else None


def with_sample_stats(tidy, records_of: dict, n_boot: int = 1000, seed: int = 0, level: float = 0.95):
    """`tidy` with sample CIs, paired deltas and the per_sample column (module doc); `records_of` maps
    (run_id, task) to that run's records of that task."""
    import pandas as pd

    from evalsuite.metrics.stats import paired_delta_ci, sums_ci
    from evalsuite.store.table import significant

    units = _Units(records_of)
    specs_of = tidy.attrs.get("metric_specs") or {}
    rows = tidy.to_dict("records")
    where = {(r["checkpoint"], r["metric_key"], r["eval_key"]): r for r in rows}
    for r in rows:
        r["ci_source"] = "stored" if _num(r["ci_low"]) is not None else ""
        r["delta_method"], r["n_paired"] = "", None
        spec = _spec(r, specs_of)
        mine = _row_units(r, spec, units)
        r["per_sample"] = "none declared" if spec.get("per_sample") is False else "stored" if mine else "missing"
        stat = spec.get("stat", "ratio")
        if r["ci_source"] == "" and len(mine) >= 2 and spec.get("ci", True):
            x, strata, fn = ms.design(list(mine.values()), stat)
            r["ci_low"], r["ci_high"] = sums_ci(x, fn, n_boot, seed, level,
                                                counts=_counts(len(x), n_boot, seed, strata))
            r["ci_source"] = "samples"
        b = where.get((r["base"], r["metric_key"], r["eval_key"])) if isinstance(r["base"], str) else None
        if b is None or b is r:
            continue
        if _num(r["delta"]) is None:
            r["delta"] = float(r["value"]) - float(b["value"])
        theirs = _row_units(b, _spec(b, specs_of), units)
        if len(mine) >= 2 and mine.keys() == theirs.keys() and spec.get("ci", True):
            keys = sorted(mine)
            a_rows, strata, fn = ms.design([mine[k] for k in keys], stat)
            b_rows, _, _ = ms.design([theirs[k] for k in keys], stat)
            _, r["delta_low"], r["delta_high"] = paired_delta_ci(
                a_rows, b_rows, fn, n_boot, seed, level, counts=_counts(len(keys), n_boot, seed, strata))
            r["delta_method"], r["n_paired"] = "paired", len(keys)
        elif _num(r["delta_low"]) is not None:
            r["delta_method"] = "independent"
    for r in rows:
        r["significant"] = significant(r)
    out = pd.DataFrame(rows, columns=list(tidy.columns) + [c for c in EXTRA_COLUMNS if c not in tidy.columns])
    out.attrs.update(tidy.attrs)
    out.attrs["sample_stats"] = {"n_boot": n_boot, "seed": seed, "level": level}
    return out


def _row_units(r: dict, spec: dict, units: _Units) -> dict:
    """The row's stored per-sample units ({} when its metric has no per-sample form or none were stored)."""
    if spec.get("per_sample") is False:
        return {}
    return units.get(r["run_id"], r["task"], r["metric"], _subset(r, units))
