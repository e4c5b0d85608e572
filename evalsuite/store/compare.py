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
            problems: list[str] | None = None, also_read=None):
    """The `store.table.Table` of the selected runs with sample statistics; its `tidy` is the table.

    `samples=False` reads no per-sample records (stored CIs, MOVER deltas). `also_read(table)` names more
    runs whose records to read in the same pass (the report's browsers); `table.records` holds every record
    read, in store order, and `table.records_of` the same grouped by (run_id, task). Samples files that
    cannot be read are described in `problems`."""
    from evalsuite.store.paired import group_records, sample_runs, with_sample_stats
    from evalsuite.store.table import build_table

    if n_boot < 1:
        raise UserError(f"--n-boot: must be >= 1, got {n_boot}")
    df = snapshot.metrics(as_of=as_of, runs=runs)
    if df.empty:
        raise UserError(f"{snapshot.path}: no metric rows (write some with `evalsuite run --store DIR`)")
    table = build_table(df, metrics, base, run_meta={m["run_id"]: m for m in snapshot.run_meta()})
    if samples:
        wanted = sample_runs(table.tidy) | set(also_read(table) if also_read else ())
        table.records = snapshot.sample_records(run_id=wanted, problems=problems)
        table.records_of = group_records(table.records)
        table.tidy = with_sample_stats(table.tidy, table.records_of, n_boot=n_boot, seed=seed)
    return table
