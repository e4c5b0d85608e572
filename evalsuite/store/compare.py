"""`compare(snapshot, base, n_boot, seed)`: the one composition of a store's rows into the tidy table that
`evalsuite table` prints and the report shows, so the two always agree.

    snap = Store("results").snapshot()
    table = compare(snap, base=None, n_boot=1000, seed=0)
    table.tidy        # one row per (checkpoint, metric, eval setup): value, CI, delta vs base, delta CI

Steps: the metric rows of the selected runs (`as_of`, `runs`) -> `store.table.build_table` (latest value per
checkpoint and setup, lineage bases, MOVER deltas) -> the per-sample records of the runs whose metrics have a
per-sample form -> `store.paired.with_sample_stats` (sample CIs, paired-bootstrap deltas).

Judged results (`with_judges`): a result whose identity holds a `judge` description (evalsuite/judge/judge.py
`Judge.identity`, under the key "judge" anywhere in the identity) is shown with its judge (`judge` column:
the local judge's folder name @ its weights' digest prefix, or the served model id). The judge is part of
the eval_key, so a delta or a paired CI never joins two judges; where the base was scored by another judge
in an otherwise equal setup, the row says so (`delta_note` "judge differs", `base_judge`) instead of a number.
"""
from __future__ import annotations

from evalsuite.errors import UserError


def compare(snapshot, base: str | None = None, n_boot: int = 1000, seed: int = 0, *,
            metrics: list[str] | None = None, as_of=None, runs=None, samples: bool = True,
            problems: list[str] | None = None, also_read=None, select=None, fields: tuple[str, ...] = ()):
    """The `store.table.Table` of the selected runs with sample statistics; its `tidy` is the table.

    `samples=False` reads no per-sample records (stored CIs, MOVER deltas). The statistics read only each
    record's stored values (`paired.STAT_FIELDS`, plus `fields`: what else the caller computes from every
    record, e.g. the report's per-object statistics); `also_read(table)` names runs whose records to read whole
    (the report's browsers). `table.records` holds every record read, in store order, and
    `table.records_of` the same grouped by (run_id, task). Samples files that cannot be read are described
    in `problems`. `select(tidy) -> tidy` keeps some rows before any record is read (the table's
    headline metrics: the statistics of the others are not computed)."""
    from evalsuite.store.paired import STAT_FIELDS, group_records, sample_runs, with_sample_stats
    from evalsuite.store.table import build_table

    if n_boot < 1:
        raise UserError(f"--n-boot: must be >= 1, got {n_boot}")
    df = snapshot.metrics(as_of=as_of, runs=runs)
    if df.empty:
        raise UserError(f"{snapshot.path}: no metric rows (write some with `evalsuite run --store DIR`)")
    table = build_table(df, metrics, base, run_meta={m["run_id"]: m for m in snapshot.run_meta()})
    if select is not None:
        table.tidy = select(table.tidy)
    table.tidy = with_judges(table.tidy, snapshot.run_meta())
    if samples:
        whole = set(also_read(table) if also_read else ())
        slim = sample_runs(table.tidy) - whole
        order = {r: i for i, r in enumerate(snapshot.select_runs())}
        table.records = sorted(snapshot.sample_records(run_id=whole, problems=problems)
                               + snapshot.sample_records(run_id=slim, problems=problems,
                                                         fields=STAT_FIELDS + tuple(fields)),
                               key=lambda r: order.get(r["run_id"], -1))      # stable: a run's order kept
        table.records_of = group_records(table.records)
        table.tidy = with_sample_stats(table.tidy, table.records_of, n_boot=n_boot, seed=seed)
    return table


JUDGE_KEY = "judge"
JUDGE_DIFFERS = "judge differs"


def split_judge(setup, depth: int = 4):
    """(judge description or None, the setup without it) of an identity dict: its "judge" entry that is a
    dict, at any level (an lmms-eval task may keep it inside its own section)."""
    if not isinstance(setup, dict) or depth < 0:
        return None, setup
    if isinstance(setup.get(JUDGE_KEY), dict):
        return setup[JUDGE_KEY], {k: v for k, v in setup.items() if k != JUDGE_KEY}
    for k, v in setup.items():
        found, rest = split_judge(v, depth - 1)
        if found is not None:
            return found, {**setup, k: rest}
    return None, setup


def judge_label(judge: dict, shown: dict | None = None) -> str:
    """A judge in a few characters: a local model's folder name @ its weights' digest prefix, a server's
    model id (and what it serves under that name, when it says so). `shown` is the result's stored
    `Judge.describe()` (its `source`), when the run recorded one."""
    from pathlib import PurePath

    source = (shown or {}).get("source")
    if judge.get("kind") == "local" or "weights" in judge:
        name = PurePath(str(source).rstrip("/")).name if isinstance(source, str) and source else "local"
        return f"{name}@{str(judge.get('weights', ''))[:8]}".rstrip("@")
    model = judge.get("model") or judge.get("name") or (shown or {}).get("model")
    root = (judge.get("served") or {}).get("root") if isinstance(judge.get("served"), dict) else None
    if model:
        return f"{model} ({root})" if root and root != model else str(model)
    from evalsuite.identity import digest

    return f"judge #{digest(judge, 8)}"


def _config_judge(meta: dict | None, task: str) -> dict | None:
    """The `judge` a run footer's task config recorded (`Judge.describe()`), if any."""
    cfg = (((meta or {}).get("tasks") or {}).get(task) or {}).get("config") or {}
    j, _ = split_judge(cfg) if isinstance(cfg, dict) else (None, None)
    return j


def with_judges(tidy, run_meta: list[dict] | None = None):
    """`tidy` plus `judge` (the row's judge label, None for a result no judge scored), `delta_note`
    ("judge differs" where the row's base was judged only by another judge in an otherwise equal setup,
    else "") and `base_judge` (that other judge's label). Two different judges always get two labels."""
    from evalsuite.identity import digest
    from evalsuite.store.table import _num

    out = tidy.copy()
    out.attrs.update(tidy.attrs)
    setups = dict(zip(tidy["eval_key"].tolist(), tidy["eval_setup"].tolist()))
    if not any(split_judge(v)[0] is not None for v in setups.values() if isinstance(v, dict)):
        out["judge"], out["delta_note"], out["base_judge"] = None, "", None    # nothing judged: nothing to do
        return out
    meta_of = {m["run_id"]: m for m in run_meta or []}
    cols = ("checkpoint", "ckpt_id", "run_id", "metric_key", "task", "eval_key", "eval_setup", "base", "is_base",
            "delta", "setup")
    # only the columns read: a whole-frame to_dict costs seconds at thousands of runs
    rows = [dict(zip(cols, vals)) for vals in zip(*(tidy[c].tolist() for c in cols))]
    of_key: dict = {}       # eval_key -> (judge digest or None, judge, the rest of the setup's digest)
    for r in rows:
        if r["eval_key"] not in of_key:
            j, rest = split_judge(r["eval_setup"] if isinstance(r["eval_setup"], dict) else {})
            of_key[r["eval_key"]] = (None if j is None else digest(j), j, rest)
    judged_tasks = {r["task"] for r in rows if of_key[r["eval_key"]][0] is not None}
    label_of: dict[str, str] = {}
    for r in rows:
        d, j, _ = of_key[r["eval_key"]]
        if d is not None and d not in label_of:
            label_of[d] = judge_label(j, _config_judge(meta_of.get(r["run_id"]), r["task"]))
    taken: dict[str, int] = {}
    for lab in label_of.values():
        taken[lab] = taken.get(lab, 0) + 1
    # one label per judge: a name two judges share (same weights, other decoding or prompt) gets its digest
    label_of = {d: lab if taken[lab] == 1 else f"{lab} #{d[:6]}" for d, lab in label_of.items()}
    labels = [label_of.get(of_key[r["eval_key"]][0]) for r in rows]
    rest_of: dict = {}      # the setup without its judge, with the task's version (both must match to meet)
    for r in rows:
        if r["task"] in judged_tasks and r["eval_key"] not in rest_of:
            version = ((meta_of.get(r["run_id"], {}).get("tasks") or {}).get(r["task"]) or {}).get("version")
            rest_of[r["eval_key"]] = digest([r["task"], version, of_key[r["eval_key"]][2]])
    at: dict = {}
    for i, r in enumerate(rows):
        if r["eval_key"] in rest_of:
            at.setdefault((r["ckpt_id"], r["metric_key"], rest_of[r["eval_key"]]), []).append(i)
    id_of = {r["checkpoint"]: r["ckpt_id"] for r in rows}
    notes, base_judges = [""] * len(rows), [None] * len(rows)
    for i, r in enumerate(rows):
        if r["eval_key"] not in rest_of or not isinstance(r["base"], str) or r["is_base"] or _num(r["delta"]) is not None:
            continue
        theirs = [labels[k] for k in at.get((id_of.get(r["base"]), r["metric_key"], rest_of[r["eval_key"]]), ())
                  if labels[k] != labels[i]]
        if theirs:
            notes[i], base_judges[i] = JUDGE_DIFFERS, ", ".join(dict.fromkeys(t or "no judge" for t in theirs))
    out["judge"], out["delta_note"], out["base_judge"] = labels, notes, base_judges
    out["setup"] = _judge_setups(rows, of_key, label_of, meta_of, judged_tasks)
    return out


def _judge_setups(rows, of_key, label_of, meta_of, judged_tasks) -> list:
    """The setup labels of judged tasks made again with each judge as its short label (judge='name@digest'
    rather than judge.kind, judge.weights, ...); other tasks' labels as they were."""
    from evalsuite.store.setups import label_setups

    setups: dict = {}
    for r in rows:
        if r["task"] in judged_tasks and r["eval_key"] not in setups.setdefault(r["task"], {}):
            d, _, rest = of_key[r["eval_key"]]
            version = ((meta_of.get(r["run_id"], {}).get("tasks") or {}).get(r["task"]) or {}).get("version")
            setups[r["task"]][r["eval_key"]] = {"task_version": version, **rest,
                                                **({"judge": label_of[d]} if d is not None else {})}
    labels = {t: label_setups(s) for t, s in setups.items()}
    return [labels[r["task"]][r["eval_key"]] if r["task"] in labels else r["setup"] for r in rows]
