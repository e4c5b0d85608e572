"""Statistics from per-sample records, shared by `evalsuite table` and the report so they always agree.

`with_sample_stats(tidy, records_of)` takes `build_table`'s rows and the records of the runs they came
from, and
  * derives POPE rows the stored metrics lack: the model's yes ratio (lmms-eval's `pope_yes_ratio` is the
    ground truth's, always 0.5 on balanced data, and is dropped where the model's can be computed), and
    accuracy, F1 and yes ratio per POPE setting (random / popular / adversarial) when one run holds several;
  * gives a row without a CI one from a bootstrap over its records;
  * replaces the delta CI by a paired bootstrap (`metrics.stats.paired_delta_ci`) where both checkpoints'
    records of the same eval_key cover the same samples (pairing key: `sample_values.units`); other
    deltas keep the MOVER interval of the two CIs (`delta_method` "independent") or have none ("");
  * adds `direction` (up / down / none) and `significant` (the delta CI excludes 0; None without a CI).
Records are used only where they reproduce the row's stored value (so records of another variant, or
records that do not carry what the metric counts, never lend a row their CI). Bootstraps are seeded
(`seed`) and sized (`n_boot`); the resample counts of one sample size are drawn once and shared by every
metric of that size.
"""
from __future__ import annotations

import functools
import math

from evalsuite.store import sample_values as sv
from evalsuite.store.table import _num

EXTRA_COLUMNS = ["direction", "ci_source", "delta_method", "n_paired", "significant"]


def group_records(records: list[dict]) -> dict:
    """{(run_id, task): [records]} from store records (`Store.sample_records`), in their order."""
    out: dict = {}
    for r in records:
        out.setdefault((r["run_id"], r["task"]), []).append(r)
    return out


def sample_runs(tidy) -> set[str]:
    """The runs whose records `with_sample_stats` reads: those of rows with a per-sample form."""
    keep = [sv.has_sample_form(m) or m in sv.REPLACED for m in tidy["metric"]]
    return set(tidy.loc[keep, "run_id"])


def _counts(n: int, n_boot: int, seed: int, strata) -> tuple:
    return _cached_counts(n, n_boot, seed, None if strata is None else tuple(strata.tolist()))


@functools.lru_cache(maxsize=6)
def _cached_counts(n: int, n_boot: int, seed: int, strata: tuple | None) -> tuple:
    """One draw of resample counts per sample size (and strata), shared by every metric of that size."""
    from evalsuite.metrics.stats import resample_counts

    return tuple(resample_counts(n, n_boot, seed, strata))


class _Units:
    """Per-run, per-metric sample units, extracted once."""

    def __init__(self, records_of: dict):
        self.records_of, self.cache = records_of, {}

    def get(self, run_id, task, metric, setting=None) -> dict:
        k = (run_id, task, metric, setting)
        if k not in self.cache:
            recs = self.records_of.get((run_id, task)) or []
            self.cache[k] = sv.units(recs, metric, setting) if recs else {}
        return self.cache[k]


def _setting(row) -> str | None:
    """The POPE setting a row is restricted to: the variant of a metric that splits by setting."""
    spec, v = sv.SAMPLE_METRICS.get(row["metric"]), row["variant"]
    return v if spec is not None and spec.by_setting and isinstance(v, str) and v else None


def _value(items: dict, metric: str) -> float:
    rows, _, stat = sv.design(list(items.values()), metric)
    return float(stat(rows.sum(0)[None])[0])


def _derived(src: dict, metric: str, setting: str | None, items: dict) -> dict:
    from evalsuite.store.table import metric_key

    row = dict(src, metric=metric, variant=setting, metric_key=metric_key(src["task"], metric, setting),
               value=_value(items, metric), ci_low=None, ci_high=None, n=len(items), higher_is_better=True,
               delta=None, delta_low=None, delta_high=None)
    return row


def _derive_pope(rows: list[dict], units: _Units) -> list[dict]:
    """Rows with the model's POPE yes ratio (and per-setting rows) after each POPE run's rows."""
    out, i = [], 0
    while i < len(rows):
        j = i
        while j < len(rows) and (rows[j]["ckpt_id"], rows[j]["run_id"], rows[j]["task"], rows[j]["eval_key"]) == \
                (rows[i]["ckpt_id"], rows[i]["run_id"], rows[i]["task"], rows[i]["eval_key"]):
            j += 1
        group = rows[i:j]
        i = j
        src = next((r for r in group if r["metric"] == "pope_accuracy" and not _setting(r)), None)
        yes = units.get(src["run_id"], src["task"], sv.MODEL_YES) if src else {}
        if not yes:
            out += group
            continue
        out += [r for r in group if r["metric"] not in sv.REPLACED]
        out.append(_derived(src, sv.MODEL_YES, None, yes))
        recs = units.records_of.get((src["run_id"], src["task"])) or []
        settings = [s for s in dict.fromkeys(sv.pope_setting(r) for r in recs) if s]
        if len(settings) > 1:
            for s in settings:
                for m in ("pope_accuracy", "pope_f1_score", sv.MODEL_YES):
                    items = units.get(src["run_id"], src["task"], m, s)
                    if items:
                        out.append(_derived(src, m, s, items))
    return out


def with_sample_stats(tidy, records_of: dict, n_boot: int = 1000, seed: int = 0, level: float = 0.95):
    """`tidy` with derived POPE rows, sample CIs and paired deltas (module doc); `records_of` maps
    (run_id, task) to that run's records of that task."""
    import pandas as pd

    from evalsuite.metrics.stats import paired_delta_ci, sums_ci
    from evalsuite.store.table import significant

    units = _Units(records_of)
    rows = _derive_pope(tidy.to_dict("records"), units)
    where = {(r["checkpoint"], r["metric_key"], r["eval_key"]): r for r in rows}
    for r in rows:
        r["direction"] = sv.direction(r["metric"], r["higher_is_better"])
        r["ci_source"] = "stored" if _num(r["ci_low"]) is not None else ""
        r["delta_method"], r["n_paired"] = "", None
        mine = _row_units(r, units)
        if r["ci_source"] == "" and len(mine) >= 2:
            x, strata, stat = sv.design(list(mine.values()), r["metric"])
            r["ci_low"], r["ci_high"] = sums_ci(x, stat, n_boot, seed, level, counts=_counts(len(x), n_boot, seed, strata))
            r["ci_source"] = "samples"
        b = where.get((r["base"], r["metric_key"], r["eval_key"])) if isinstance(r["base"], str) else None
        if b is None or b is r:
            continue
        if _num(r["delta"]) is None:
            r["delta"] = float(r["value"]) - float(b["value"])
        theirs = _row_units(b, units)
        if len(mine) >= 2 and mine.keys() == theirs.keys():
            keys = sorted(mine)
            a_rows, strata, stat = sv.design([mine[k] for k in keys], r["metric"])
            b_rows, _, _ = sv.design([theirs[k] for k in keys], r["metric"])
            _, r["delta_low"], r["delta_high"] = paired_delta_ci(
                a_rows, b_rows, stat, n_boot, seed, level, counts=_counts(len(keys), n_boot, seed, strata))
            r["delta_method"], r["n_paired"] = "paired", len(keys)
        elif _num(r["delta_low"]) is not None:
            r["delta_method"] = "independent"
    for r in rows:
        r["significant"] = significant(r)
    out = pd.DataFrame(rows, columns=list(tidy.columns) + [c for c in EXTRA_COLUMNS if c not in tidy.columns])
    out.attrs["sample_stats"] = {"n_boot": n_boot, "seed": seed, "level": level}
    return out


def _row_units(r: dict, units: _Units) -> dict:
    """The row's sample units, when its records reproduce its stored value (records of another
    variant, or a task whose records do not carry what its metric counts, are not used)."""
    if not sv.has_sample_form(r["metric"]):
        return {}
    items = units.get(r["run_id"], r["task"], r["metric"], _setting(r))
    if items and not math.isclose(_value(items, r["metric"]), float(r["value"]), rel_tol=1e-6, abs_tol=1e-9):
        return {}
    return items
