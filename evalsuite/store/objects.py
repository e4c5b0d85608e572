"""Per-object hallucination across checkpoints, from the stored per-sample records.

A task has object records when its records carry `mentions` and `hallucinated`: lists of the objects a
response mentions and of those among them that are not in the image (CHAIR's records hold `[word,
object]` pairs, `evalsuite.metrics.chair.score_caption`; a plain object name is read as itself). So
CHAIR's variants, and any task writing the same two fields, get the analysis with no code of their own.

Per checkpoint and object: mentions, hallucinated mentions, the rate hallucinated / mentions (the
object's own CHAIR_i: summed over objects, the counts are CHAIR_i's numerator and denominator), and the
number of images whose response mentions the object.

Between two checkpoints of one evaluation setup (eval_key): Δ rate = rate(vs) - rate(base) over the images
both checkpoints answered, with a paired percentile bootstrap over those images: each replicate draws
the images once and applies the draw to both checkpoints and every object (`metrics.stats.resample_counts`,
as `store.paired` does for metrics). A replicate in which either checkpoint has no mention of the object
leaves its rate undefined and is skipped for that object; an object one of the two checkpoints never
mentions has no Δ rate (listed apart: `Comparison.one_sided`). Beside the rate, every object gets the
change in its hallucinated mentions per image, (h(vs) - h(base)) / images, with the same paired CI: it is
defined also for an object a checkpoint stops (or starts) mentioning altogether.

Default pairs: per lineage (checkpoints linked by their manifests' parent, `store.table.bases`), its base
against its latest checkpoint with object records of the setup; `base`/`vs` name either end instead.
Checkpoint rows are `store.table.build_table`'s, so the table, the report and this module agree on
names, lineages and which run is a checkpoint's latest.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from evalsuite.errors import UserError

MENTIONS, HALLUCINATED = "mentions", "hallucinated"


def object_name(item) -> str | None:
    """The object of one `mentions`/`hallucinated` entry: the last element of a [word, object] pair,
    or a plain name."""
    if isinstance(item, (list, tuple)):
        item = item[-1] if item else None
    return item if isinstance(item, str) and item else None


def has_objects(record: dict) -> bool:
    return isinstance(record.get(MENTIONS), list) and isinstance(record.get(HALLUCINATED), list)


def unit_counts(records: list[dict]) -> dict[str, dict[str, list[int]]]:
    """{image unit: {object: [hallucinated, mentions]}} (records of one unit summed; the unit is the
    one the metric bootstraps use: `value_unit`, else key, else image id)."""
    from evalsuite.tasks import metric_spec as ms

    out: dict[str, dict[str, list[int]]] = {}
    for r in records:
        if not has_objects(r):
            continue
        unit = r.get(ms.UNIT) if r.get(ms.UNIT) is not None else ms.sample_key(r)
        if unit is None:
            continue
        objs = out.setdefault(str(unit), {})
        for item in r[MENTIONS]:
            name = object_name(item)
            if name is not None:
                objs.setdefault(name, [0, 0])[1] += 1
        for item in r[HALLUCINATED]:
            name = object_name(item)
            if name is not None:
                objs.setdefault(name, [0, 0])[0] += 1
    return out


def totals(units: dict[str, dict[str, list[int]]], keep=None) -> dict[str, dict]:
    """{object: {mentions, hallucinated, images, rate}} over `units` (those in `keep` when given);
    rate is None for an object never mentioned."""
    out: dict[str, dict] = {}
    for u, objs in units.items():
        if keep is not None and u not in keep:
            continue
        for name, (h, m) in objs.items():
            t = out.setdefault(name, {"mentions": 0, "hallucinated": 0, "images": 0})
            t["mentions"] += m
            t["hallucinated"] += h
            t["images"] += m > 0
    for t in out.values():
        t["rate"] = t["hallucinated"] / t["mentions"] if t["mentions"] else None
    return out


@dataclass
class ObjectRow:
    """One object of a comparison: its counts on the shared images, Δ rate and its CI."""

    object: str
    base: dict                 # {mentions, hallucinated, images, rate}
    vs: dict
    delta: float | None
    low: float | None
    high: float | None
    n_defined: int             # bootstrap replicates in which both rates were defined
    per_image: tuple = (None, None, None)   # Δ hallucinated mentions per image (value, low, high)

    @property
    def significant(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return bool(self.low > 0 or self.high < 0)


@dataclass
class Comparison:
    """Base vs one later checkpoint in one evaluation setup of one task."""

    task: str
    eval_key: str
    setup: str                 # what tells this setup from the task's others ("" when it is the only one)
    variant: str | None
    base: str                  # checkpoint names
    vs: str
    n_images: int              # images both answered (the bootstrap's units)
    rows: list[ObjectRow]      # every object either mentions, Δ defined, by Δ ascending
    one_sided: list[ObjectRow]     # objects only one of the two mentions (no Δ)
    series: list[dict]         # [{name, iteration, objects: totals()}] for the lineage's checkpoints in order
    n_boot: int
    seed: int
    level: float
    notes: list[str] = field(default_factory=list)

    def top(self, n: int | None) -> list[ObjectRow]:
        """The `n` objects whose rate changed most (|Δ|, then mentions), in Δ order (largest fall first)."""
        ranked = sorted(self.rows, key=lambda r: (-abs(r.delta), -(r.base["mentions"] + r.vs["mentions"]),
                                                  r.object))
        return sorted(ranked[:n] if n else ranked, key=lambda r: (r.delta, r.object))


def paired_object_cis(base_units: dict, vs_units: dict, objects: list[str], n_boot: int, seed: int,
                      level: float = 0.95) -> dict[str, tuple]:
    """{object: (delta, low, high, n_defined, (per_image, low, high))} of rate(vs) - rate(base) over the
    units both have, by a paired bootstrap over those units (module doc; delta/low/high are None where
    undefined), and of its hallucinated mentions per image, (h(vs) - h(base)) / images, always defined."""
    import numpy as np

    from evalsuite.metrics.stats import resample_counts

    keys = sorted(set(base_units) & set(vs_units))
    k = len(objects)
    if not keys or not k:
        return {o: (None, None, None, 0, (None, None, None)) for o in objects}
    col = {o: j for j, o in enumerate(objects)}

    def arrays(units):
        h, m = np.zeros((len(keys), k)), np.zeros((len(keys), k))
        for i, u in enumerate(keys):
            for name, (hh, mm) in units[u].items():
                if name in col:
                    h[i, col[name]], m[i, col[name]] = hh, mm
        return h, m

    (hb, mb), (hv, mv) = arrays(base_units), arrays(vs_units)

    def rate(h, m):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(m > 0, h / np.where(m > 0, m, 1), np.nan)

    n, q = len(keys), [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    point = rate(hv.sum(0), mv.sum(0)) - rate(hb.sum(0), mb.sum(0))
    reps, per_image = [], []
    if n_boot >= 1:
        for c in resample_counts(n, n_boot, seed):
            c = c.astype(np.float64)
            reps.append(rate(c @ hv, c @ mv) - rate(c @ hb, c @ mb))
            per_image.append(c @ (hv - hb) / n)
    reps = np.concatenate(reps) if reps else np.full((0, k), np.nan)
    per_image = np.concatenate(per_image) if per_image else np.full((0, k), np.nan)
    out = {}
    for o, j in col.items():
        d = point[j]
        pi = float((hv[:, j] - hb[:, j]).sum() / n)
        pi_ci = tuple(float(x) for x in np.percentile(per_image[:, j], q)) if len(per_image) else (None, None)
        ok = reps[:, j][~np.isnan(reps[:, j])]
        if math.isnan(d) or len(ok) == 0:
            out[o] = (None if math.isnan(d) else float(d), None, None, 0, (pi, *pi_ci))
            continue
        lo, hi = np.percentile(ok, q)
        out[o] = (float(d), float(lo), float(hi), int(len(ok)), (pi, *pi_ci))
    return out


def object_tasks(tidy, records_of: dict) -> list[str]:
    """The tasks of `tidy` whose (shown) runs stored object records."""
    out = []
    for run, task in dict.fromkeys(zip(tidy["run_id"], tidy["task"])):
        if task not in out and any(has_objects(r) for r in records_of.get((run, task)) or ()):
            out.append(task)
    return out


def _runs_of(rows, records_of: dict) -> dict:
    """{ckpt_id: run_id} of one (task, eval_key): each checkpoint's latest run holding object records."""
    out = {}
    for r in rows.itertuples():
        if r.ckpt_id not in out and any(has_objects(x) for x in records_of.get((r.run_id, r.task)) or ()):
            out[r.ckpt_id] = r.run_id
    return out


def _pairs(ckpts, have: list, base: str | None, vs: str | None) -> list[tuple]:
    """(base id, vs id, series ids) for one setup; `have` = the checkpoint ids with records, in table order."""
    from evalsuite.store.table import bases, find_checkpoint

    lineage = dict(zip(ckpts["ckpt_id"], ckpts["lineage"]))
    if base is None and vs is None:
        out = []
        base_of = bases(ckpts)
        for lin in dict.fromkeys(lineage[c] for c in have):
            mine = [c for c in have if lineage[c] == lin]
            if len(mine) < 2:
                continue
            b = base_of.get(mine[0])
            b = b if b in mine else mine[0]
            v = [c for c in mine if c != b][-1]
            out.append((b, v, mine))
        return out
    b = _find(ckpts, base, "--base", find_checkpoint) if base is not None else None
    v = _find(ckpts, vs, "--vs", find_checkpoint) if vs is not None else None
    if b is None:
        b = bases(ckpts).get(v)
        if b is None or b == v:
            raise UserError(f"--vs {vs!r}: no other checkpoint of its lineage to compare with; pass --base")
    if v is None:
        later = [c for c in have if lineage[c] == lineage[b] and c != b]
        if not later:       # not in this setup (another may have one; none at all: the caller says so)
            return []
        v = later[-1]
    if b not in have or v not in have:
        return []
    series = [c for c in have if lineage[c] == lineage[b] == lineage[v]] or [b, v]
    return [(b, v, series if b in series and v in series else [b, v])]


def _find(ckpts, ref, flag, find):
    try:
        return find(ckpts, ref)
    except UserError as e:
        raise UserError(str(e).replace("--base", flag, 1)) from None


def comparisons(table, records_of: dict, *, task: str | None = None, variant: str | None = None,
                base: str | None = None, vs: str | None = None, n_boot: int = 1000, seed: int = 0,
                level: float = 0.95) -> list[Comparison]:
    """The comparisons of `table` (`store.table.build_table`) and `records_of` ({(run_id, task):
    records}, `store.paired.group_records`): one per task with object records, setup and pair of
    checkpoints (module doc). `task`/`variant` narrow the tasks and setups; a task without object
    records, or a variant it does not have, is a UserError naming the flag."""
    tidy = table.tidy
    tasks = object_tasks(tidy, records_of)
    if task is not None:
        if task not in set(tidy["task"]):
            have = sorted(set(tidy["task"]))
            raise UserError(f"--task {task}: not in the store (it has: {', '.join(have) or 'nothing'})")
        if task not in tasks:
            raise UserError(f"--task {task}: its records have no per-object fields ({MENTIONS}, {HALLUCINATED}); "
                            f"tasks with them: {', '.join(tasks) or 'none in this store'}")
        tasks = [task]
    if variant is not None:
        mine = tidy[tidy["task"].isin(tasks)]
        if not (mine["variant"] == variant).any():
            have = sorted({v for v in mine["variant"] if isinstance(v, str) and v})
            raise UserError(f"--variant {variant}: no such variant of {', '.join(tasks)}; "
                            f"have: {', '.join(have) or 'none'}")
    out = []
    for t in tasks:
        rows = tidy[tidy["task"] == t]
        if variant is not None:
            rows = rows[rows["variant"] == variant]
        for e, g in rows.groupby("eval_key", sort=False):
            runs = _runs_of(g, records_of)
            have = [c for c in table.ckpts["ckpt_id"] if c in runs]
            for b, v, series in _pairs(table.ckpts, have, base, vs):
                out.append(_compare(table, records_of, t, e, g, runs, b, v, series, n_boot, seed, level))
    return out


def _compare(table, records_of, task, eval_key, rows, runs, b, v, series, n_boot, seed, level) -> Comparison:
    names = dict(zip(table.ckpts["ckpt_id"], table.ckpts["name"]))
    iters = dict(zip(table.ckpts["ckpt_id"], table.ckpts["iteration"]))
    units = {c: unit_counts(records_of[(runs[c], task)]) for c in dict.fromkeys([*series, b, v])}
    shared = set(units[b]) & set(units[v])
    tb, tv = totals(units[b], shared), totals(units[v], shared)
    objects = sorted(set(tb) | set(tv))
    cis = paired_object_cis(units[b], units[v], objects, n_boot, seed, level)
    empty = {"mentions": 0, "hallucinated": 0, "images": 0, "rate": None}
    both, one = [], []
    for o in objects:
        d, lo, hi, n_ok, pi = cis[o]
        row = ObjectRow(o, tb.get(o, empty), tv.get(o, empty), d, lo, hi, n_ok, pi)
        (both if d is not None else one).append(row)
    both.sort(key=lambda r: (r.delta, r.object))
    first = rows.iloc[0]
    notes = []
    if len(shared) < max(len(units[b]), len(units[v])):
        notes.append(f"{names[b]} has {len(units[b])} images, {names[v]} {len(units[v])}: compared on the "
                     f"{len(shared)} both answered")
    series_out = []
    for c in series:
        it = iters.get(c)
        series_out.append({"name": names[c], "iteration": None if it is None or _nan(it) else int(it),
                           "objects": totals(units[c])})
    return Comparison(task=task, eval_key=eval_key, setup=first["setup"] or "",
                      variant=first["variant"] if isinstance(first["variant"], str) and first["variant"] else None,
                      base=names[b], vs=names[v], n_images=len(shared), rows=both, one_sided=one,
                      series=series_out, n_boot=n_boot, seed=seed, level=level, notes=notes)


def _nan(x) -> bool:
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return True


def compare_store(snap, *, task: str | None = None, variant: str | None = None, base: str | None = None,
                  vs: str | None = None, as_of=None, runs=None, n_boot: int = 1000, seed: int = 0) -> list[Comparison]:
    """`comparisons` read from a store snapshot (`Store.snapshot()`): its rows, run metadata and the
    records of the runs the table shows."""
    from evalsuite.store.paired import group_records
    from evalsuite.store.table import build_table

    df = snap.metrics(as_of=as_of, runs=runs)
    table = build_table(df, run_meta={m["run_id"]: m for m in snap.run_meta()})
    shown = table.tidy if task is None else table.tidy[table.tidy["task"] == task]
    records = snap.sample_records(task=task, run_id=set(shown["run_id"])) if len(shown) else []
    if task is not None and len(shown) and not any(has_objects(r) for r in records):
        # the error names the tasks that do have object records: read theirs too (the failing path only)
        records = snap.sample_records(run_id=set(table.tidy["run_id"]))
    return comparisons(table, group_records(records), task=task, variant=variant, base=base, vs=vs,
                       n_boot=n_boot, seed=seed)


# ---- text output ---------------------------------------------------------------------------------

CSV_COLUMNS = ["task", "variant", "setup", "base", "vs", "object", "base_mentions", "base_hallucinated",
               "base_rate", "vs_mentions", "vs_hallucinated", "vs_rate", "delta", "delta_low", "delta_high",
               "significant", "per_image_delta", "per_image_low", "per_image_high", "n_images", "n_boot", "seed"]


def _rate(t: dict) -> str:
    from evalsuite.store.table import fmt

    return f"{fmt(t['rate'])} ({t['hallucinated']}/{t['mentions']})" if t["rate"] is not None else \
        f"– (0/{t['mentions']})"


def per_image_text(r: ObjectRow) -> str:
    """"-0.250 [-0.400, -0.100]*": Δ hallucinated mentions per image, its CI, * when it excludes 0."""
    from evalsuite.store.table import fmt

    d, lo, hi = r.per_image
    if d is None:
        return "–"
    if lo is None:
        return fmt(d, True)
    return f"{fmt(d, True)} [{fmt(lo, True)}, {fmt(hi, True)}]{'*' if lo > 0 or hi < 0 else ''}"


_per_image = per_image_text


def _title(c: Comparison) -> str:
    tag = ", ".join(x for x in (c.variant, c.setup) if x)
    return f"{c.task}{f' [{tag}]' if tag else ''}: {c.base} → {c.vs}"


def to_markdown(comps: list[Comparison], top: int | None) -> str:
    from evalsuite.store.table import _md, fmt

    out = []
    for c in comps:
        rows = c.top(top)
        out += [f"### {_md(_title(c))}", "",
                f"| object | {_md(c.base)} rate (hal/mentions) | {_md(c.vs)} rate (hal/mentions) | Δ rate "
                f"[{round(c.level * 100)}% CI] | Δ hal/image [CI] | images mentioning (base → vs) |",
                "|---|---|---|---|---|---|"]
        for r in rows:
            ci = f" [{fmt(r.low, True)}, {fmt(r.high, True)}]" if r.low is not None else " [no CI]"
            out.append(f"| {_md(r.object)} | {_rate(r.base)} | {_rate(r.vs)} | {fmt(r.delta, True)}{ci}"
                       f"{'*' if r.significant else ''} | {_per_image(r)} | {r.base['images']} → {r.vs['images']} |")
        if not rows:
            out.append(f"| ({'no object both checkpoints mention' if c.one_sided else 'neither mentions any object'})"
                       " | | | | | |")
        shown = f"the {len(rows)} of {len(c.rows)} objects whose rate changed most" if top and len(c.rows) > top \
            else f"all {len(c.rows)} objects both mention"
        shown = f"{shown}, largest fall first" if c.rows else "no object both mention"
        out += ["", f"Rate = hallucinated / mentions of the object; {shown}. Δ CI: paired "
                    f"bootstrap over the {c.n_images} images both answered (n_boot {c.n_boot}, seed {c.seed}); "
                    "*: the CI excludes 0. Δ hal/image: the change in the object's hallucinated mentions per image "
                    "(same bootstrap)."]
        if c.one_sided:
            out.append("Mentioned by one checkpoint only (no rate to compare): " + "; ".join(
                f"{_md(r.object)} ({_md(c.base)} {_rate(r.base)}, {_md(c.vs)} {_rate(r.vs)}; Δ hal/image "
                f"{_per_image(r)})" for r in c.one_sided) + ".")
        out += [f"Note: {_md(n)}." for n in c.notes]
        out.append("")
    return "\n".join(out).rstrip("\n")


def to_csv(comps: list[Comparison], top: int | None) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for c in comps:
        for r in c.top(top) + c.one_sided:
            w.writerow([c.task, c.variant or "", c.setup, c.base, c.vs, r.object,
                        r.base["mentions"], r.base["hallucinated"], _csv_num(r.base["rate"]),
                        r.vs["mentions"], r.vs["hallucinated"], _csv_num(r.vs["rate"]),
                        _csv_num(r.delta), _csv_num(r.low), _csv_num(r.high),
                        "" if r.significant is None else str(r.significant).lower(),
                        *(_csv_num(x) for x in r.per_image), c.n_images, c.n_boot, c.seed])
    return buf.getvalue()


def _csv_num(x) -> str:
    return "" if x is None else repr(float(x))
