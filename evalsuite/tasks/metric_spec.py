"""What a task's metric is, declared once next to the code that computes it, and the one function that
turns per-sample values into the stored numbers.

    METRICS = (MetricSpec("CHAIRi", "down", lambda s: (len(s["hallucinated"]), len(s["mentions"]))), ...)
    metrics = score(samples, METRICS, n_boot=1000, seed=0)     # -> [MetricValue]; fills s["values"]

A spec names the metric, its direction ("up"/"down" = higher/lower is better, "none" = a diagnostic:
context for the others, never better or worse), how one sample becomes a row of numbers (`row`), and
how the column sums of those rows give the value (`stat`: "ratio" = col0/col1, so a mean is
(x, 1) and a ratio of sums is (num, den); "f1"; "sum_of_ratios" = MME's sum of per-stratum means).
`score` stores each sample's row under `sample["values"][name]`, so the store keeps exactly the numbers
the value was computed from, and `evalsuite table` / the report bootstrap (CIs, paired deltas) over
those stored rows (`evalsuite.store.paired`), never re-deriving them from record fields.

Optional per spec: `unit` (the pairing unit when one unit is several samples: MME's image of two
questions; its rows are summed), `stratum` (resampled on its own: MME's category), `subset` (extra rows
per subset, variant = subset name: POPE's sampling setting), `ci` (False: no CI and no paired delta,
the value alone). A metric with no per-sample form (a median) has `row=None`: it is stored with
`per_sample: False` in the run's metric specs and the table says it has no per-sample values.

`specs_extra(specs)` is what a TaskResult's `extra["metric_specs"]` carries: the store keeps it in the
run footer, and the table reads direction and stat from it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from evalsuite.types import MetricValue

Direction = Literal["up", "down", "none"]
DIRECTIONS = ("up", "down", "none")
VALUES = "values"           # sample[VALUES][metric] = the sample's row (a list of floats)
UNIT, STRATUM, SUBSET = "value_unit", "value_stratum", "value_subset"


def stat_fn(name: str) -> Callable:
    """The column-sums -> value function a spec names (evalsuite/metrics/stats.py)."""
    from evalsuite.metrics import stats

    fns = {"ratio": stats.ratio_stat, "f1": stats.f1_stat, "sum_of_ratios": stats.sum_of_ratios_stat}
    if name not in fns:
        raise ValueError(f"unknown metric stat {name!r} (one of {sorted(fns)})")
    return fns[name]


@dataclass(frozen=True)
class MetricSpec:
    name: str
    direction: Direction
    row: Callable[[dict], Sequence[float] | None] | None   # one sample -> its row; None: no per-sample form
    stat: str = "ratio"
    ci: bool = True                                  # a bootstrap CI and a paired delta CI
    unit: Callable[[dict], str] | None = None        # pairing unit (default: the sample's key)
    stratum: Callable[[dict], str] | None = None     # bootstrap strata (needs stat "sum_of_ratios")
    subset: Callable[[dict], str | None] | None = None   # extra rows per subset (variant = subset)
    variant: str | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name}: direction must be one of {DIRECTIONS}, got {self.direction!r}")
        stat_fn(self.stat)

    def describe(self) -> dict:
        return {"direction": self.direction, "stat": self.stat, "ci": self.ci, "per_sample": self.row is not None}


def specs_extra(specs: Sequence[MetricSpec]) -> dict:
    """{metric: describe()}: stored with the result (TaskResult.extra["metric_specs"])."""
    return {s.name: s.describe() for s in specs}


def sample_key(s: dict) -> str | None:
    k = s.get("key", s.get("image_id"))
    return None if k is None else str(k)


def fill_values(samples: list[dict], specs: Sequence[MetricSpec]) -> None:
    """Each sample's rows under sample["values"] (and its unit / stratum / subset where a spec has them)."""
    for s in samples:
        values = {}     # a record copied from another task's (relevance from caption) starts anew
        for spec in specs:
            if spec.row is None:
                continue
            row = spec.row(s)
            if row is not None:
                values[spec.name] = [float(x) for x in row]
            for field, fn in ((UNIT, spec.unit), (STRATUM, spec.stratum), (SUBSET, spec.subset)):
                if fn is not None:
                    s[field] = fn(s)
        s[VALUES] = values


def units(records: list[dict], metric: str, subset: str | None = None) -> dict[str, tuple[str | None, tuple]]:
    """{unit key: (stratum, row)} from stored per-sample values (rows of one unit summed); `subset`
    keeps that subset's samples only. {} when no record carries values of `metric`."""
    out: dict[str, tuple[str | None, list]] = {}
    for r in records:
        v = (r.get(VALUES) or {}).get(metric) if isinstance(r.get(VALUES), dict) else None
        if v is None or (subset is not None and r.get(SUBSET) != subset):
            continue
        key = r.get(UNIT) if r.get(UNIT) is not None else sample_key(r)
        if key is None:
            continue
        stratum = r.get(STRATUM)
        if key in out:
            out[key] = (stratum, [a + float(b) for a, b in zip(out[key][1], v)])
        else:
            out[key] = (stratum, [float(x) for x in v])
    return {k: (s, tuple(row)) for k, (s, row) in out.items()}


def design(items: list[tuple[str | None, tuple]], stat: str):
    """(rows (n, k), strata or None, stat function) for the bootstrap. With strata (MME) each unit's
    (value, count) pair goes to its stratum's column pair, and the strata are resampled on their own."""
    import numpy as np

    strata = [c for c, _ in items]
    if stat == "sum_of_ratios" and any(c is not None for c in strata):
        cats = sorted({str(c) for c in strata})
        rows = np.zeros((len(items), 2 * len(cats)))
        for i, (c, (v, one)) in enumerate(items):
            j = cats.index(str(c))
            rows[i, 2 * j:2 * j + 2] = (v, one)
        return rows, np.array([str(c) for c in strata]), stat_fn(stat)
    return np.array([row for _, row in items], dtype=float), None, stat_fn(stat)


def value_of(items: dict, stat: str) -> float:
    rows, _, fn = design(list(items.values()), stat)
    return float(fn(rows.sum(0)[None])[0])


def score(samples: list[dict], specs: Sequence[MetricSpec], n_boot: int = 1000, seed: int = 0,
          level: float = 0.95, variant: str | None = None) -> list[MetricValue]:
    """The one place an own task's values are computed (module doc): fills each sample's values, then
    one MetricValue per spec (value from the column sums, CI by a bootstrap over the same rows), plus
    one per subset where a spec has subsets and the samples hold more than one. `variant` names the
    rows of a spec without a variant of its own (CHAIR's variant option)."""
    from evalsuite.metrics.stats import resample_counts, sums_ci

    fill_values(samples, specs)
    out = []
    for spec in specs:
        if spec.row is None:
            continue
        groups = [None]
        if spec.subset is not None:
            found = [g for g in dict.fromkeys(s.get(SUBSET) for s in samples) if g is not None]
            groups += found if len(found) > 1 else []
        for g in groups:
            items = units(samples, spec.name, g)
            if not items:
                continue
            value = value_of(items, spec.stat)
            lo = hi = None
            if spec.ci and n_boot > 0 and len(items) >= 2:
                rows, strata, fn = design(list(items.values()), spec.stat)
                lo, hi = sums_ci(rows, fn, n_boot, seed, level, counts=resample_counts(len(rows), n_boot, seed, strata))
            out.append(MetricValue(spec.name, value, higher_is_better=spec.direction == "up", n=len(items),
                                   ci_low=lo, ci_high=hi, variant=g if g is not None else spec.variant or variant))
    return out
