"""The columns of a store's metric rows, per schema version, and how old versions are read.

Every metrics file carries its schema version twice: in the `schema_version` column and in the Parquet
footer (`evalsuite.schema`). A reader upgrades each file to `SCHEMA_VERSION` in memory; files are never
rewritten, so an old store stays exactly as it was written.

History
- v1: the first layout. `checkpoint` (path) instead of `ckpt`; no `label`, `parent`, `stderr`,
  `lmms_eval_version`; no `written_at` (the file's `created_at` stood for both).
- v2 (current): adds those columns and renames `checkpoint` -> `ckpt`.

To bump: add the new columns to `COLUMNS`, raise `SCHEMA_VERSION`, and add an `_upgrade_vN` that turns
a vN frame into a vN+1 frame; a unit test reads a hand-written file of every older version.
"""
from __future__ import annotations

from evalsuite.errors import UserError

SCHEMA_VERSION = 2

# (name, arrow type) of the current schema, in file order. Kept as strings so importing this module
# does not import pyarrow; `arrow_schema()` builds the real thing.
COLUMNS: list[tuple[str, str]] = [
    ("schema_version", "int32"),
    ("run_id", "string"),
    ("written_at", "string"),       # when the store received the row (orders store versions)
    ("created_at", "string"),       # when the run that produced it started
    ("label", "string"),
    ("ckpt", "string"),
    ("ckpt_hash", "string"),
    ("iteration", "int64"),
    ("method", "string"),
    ("parent", "string"),
    ("task", "string"),
    ("task_version", "string"),
    ("metric", "string"),
    ("variant", "string"),
    ("value", "float64"),
    ("ci_low", "float64"),
    ("ci_high", "float64"),
    ("n", "int64"),
    ("stderr", "float64"),
    ("higher_is_better", "bool"),
    ("config_hash", "string"),
    ("evalsuite_version", "string"),
    ("lmms_eval_version", "string"),
]
COLUMN_NAMES = [c for c, _ in COLUMNS]


def arrow_schema():
    import pyarrow as pa

    types = {"int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(),
             "string": pa.string(), "bool": pa.bool_()}
    return pa.schema([(name, types[t]) for name, t in COLUMNS])


def _upgrade_v1(df):
    """v1 -> v2: rename `checkpoint`, add the columns v1 did not have (unknown, so null)."""
    df = df.rename(columns={"checkpoint": "ckpt"})
    for col in ("label", "parent", "stderr", "lmms_eval_version"):
        df[col] = None
    df["written_at"] = df["created_at"]
    df["schema_version"] = 2
    return df


_UPGRADES = {1: _upgrade_v1}


def upgrade(df, version: int, source: str):
    """Bring a frame read from `source` (a file name, for messages) at `version` up to SCHEMA_VERSION."""
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{source}: written with store schema v{version}, this evalsuite reads up to "
            f"v{SCHEMA_VERSION}; upgrade evalsuite to read it"
        )
    while version < SCHEMA_VERSION:
        if version not in _UPGRADES:
            raise UserError(f"{source}: unknown store schema v{version}")
        df = _UPGRADES[version](df)
        version += 1
    missing = [c for c in COLUMN_NAMES if c not in df.columns]
    if missing:
        raise UserError(f"{source}: schema v{SCHEMA_VERSION} file lacks columns {missing}")
    return df[COLUMN_NAMES]
