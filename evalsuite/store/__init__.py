"""Append-only versioned results store: long-format metric rows plus per-sample records.

    from evalsuite.store import Store
    run_id = Store("results").write_run(meta, task_results)
    Store("results").snapshot().metrics()   # pandas.read_parquet("results/metrics") reads the same rows
    compare(Store("results").snapshot())    # the table `evalsuite table` prints and the report shows
"""
from evalsuite.store.schema import SCHEMA_VERSION
from evalsuite.store.compare import compare
from evalsuite.store.store import Snapshot, Store, config_hash, new_run_id

__all__ = ["Store", "Snapshot", "SCHEMA_VERSION", "compare", "config_hash", "new_run_id"]
