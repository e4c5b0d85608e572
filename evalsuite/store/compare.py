"""`compare(snapshot, base, n_boot, seed)`: the one composition of a store's rows into the tidy table that
`evalsuite table` prints and the report shows, so the two always agree.

    snap = Store("results").snapshot()
    table = compare(snap, base=None, n_boot=1000, seed=0)
    table.tidy        # one row per (checkpoint, metric, eval setup): value, CI, delta vs base, delta CI

Steps: the metric rows of the selected runs (`as_of`, `runs`) -> `store.table.build_table` (latest value per
checkpoint and setup, lineage bases, MOVER deltas) -> the per-sample records of the runs whose metrics have a
per-sample form -> `store.paired.with_sample_stats` (sample CIs, paired-bootstrap deltas).
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
