"""Append-only versioned results store: long-format metric rows plus per-sample records.

    from evalsuite.store import Store
    run_id = Store("results").write_run(meta, task_results)
    Store("results").metrics()          # pandas.read_parquet("results/metrics") reads the same rows
"""
from evalsuite.store.schema import SCHEMA_VERSION
from evalsuite.store.store import Snapshot, Store, config_hash, new_run_id

__all__ = ["Store", "Snapshot", "SCHEMA_VERSION", "config_hash", "new_run_id"]
