"""The columns of a store's metric rows, per schema version, and how old versions are read.

Every metrics file carries its schema version twice: in the `schema_version` column and in the Parquet
footer (`evalsuite.schema`). A reader upgrades each file to `SCHEMA_VERSION` in memory; files are never
rewritten, so an old store stays exactly as it was written.

History
- v1: the first layout. `checkpoint` (path) instead of `ckpt`; no `label`, `parent`, `stderr`,
  `lmms_eval_version`; no `written_at` (the file's `created_at` stood for both).
- v2: adds those columns and renames `checkpoint` -> `ckpt`.
- v3 (current): adds `eval_key` and `eval_setup` (the `TaskResult.identity` as canonical JSON: what
  makes two results comparable, see `evalsuite.types.eval_key`) and `generator` (the checkpoint that
  generated the data a row describes: set on CSR pair statistics, whose `ckpt` columns name that
  same checkpoint). A v2 row's setup is its task config from the run footer plus the run's data root
  (v2 recorded no data fingerprint), so two v2 runs are comparable when those match; a v2 CSR pair
  row gets the generator's iteration (t - 1) in place of the one it trained (t).

To bump: add the new columns to `COLUMNS`, raise `SCHEMA_VERSION`, and add an `_upgrade_vN(df, meta)`
that turns a vN frame (and the run metadata of its footer) into a vN+1 frame; a unit test reads a
hand-written file of every older version.
"""
from __future__ import annotations

from evalsuite.errors import UserError

SCHEMA_VERSION = 3

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
    ("generator", "string"),        # CSR pair statistics: the checkpoint that generated the pairs
    ("task", "string"),
    ("task_version", "string"),
    ("eval_key", "string"),         # rows are comparable exactly when their eval_keys are equal
    ("eval_setup", "string"),       # JSON: the identity the key hashes (labels what differs)
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


def _upgrade_v1(df, meta: dict):
    """v1 -> v2: rename `checkpoint`, add the columns v1 did not have (unknown, so null)."""
    df = df.rename(columns={"checkpoint": "ckpt"})
    for col in ("label", "parent", "stderr", "lmms_eval_version"):
        df[col] = None
    df["written_at"] = df["created_at"]
    df["schema_version"] = 2
    return df


def v2_identity(task: str, task_config, data_root) -> dict:
    """The setup of a v2 row: what its run footer recorded about the task (split, prompt, image count,
    generation settings, limit...) and the data root it read. CSR pair statistics recorded which
    iteration and generator they belong to there: bookkeeping, not setup, so left out."""
    cfg = dict(task_config) if isinstance(task_config, dict) else None
    if cfg is not None and task == "csr_pairs":
        cfg = {k: v for k, v in cfg.items() if k not in ("iteration", "generator")}
    return {"v2_task_config": cfg, "data_root": None if data_root is None else str(data_root)}


def _upgrade_v2(df, meta: dict):
    """v2 -> v3: eval_key/eval_setup from the footer's task configs (`meta["tasks"]`); generator unknown."""
    import json

    from evalsuite.types import eval_key

    tasks = meta.get("tasks") if isinstance(meta.get("tasks"), dict) else {}
    setups, keys = [], []
    for task, version in zip(df["task"], df["task_version"]):
        ident = v2_identity(task, (tasks.get(task) or {}).get("config"), meta.get("data_root"))
        setups.append(json.dumps(ident, sort_keys=True, default=str))
        keys.append(eval_key(task, version, ident))
    df["eval_setup"], df["eval_key"] = setups, keys
    df["generator"] = None
    # v2 CSR pair rows named the generating checkpoint M_{t-1} in `ckpt` but the iteration t they
    # train in `iteration` (and labelled it iter_t); v3 rows describe the generator throughout
    pairs = (df["task"] == "csr_pairs").to_numpy()
    if pairs.any():
        df["generator"] = df["generator"].astype(object)
        df.loc[pairs, "generator"] = df.loc[pairs, "ckpt_hash"]
        df.loc[pairs, "iteration"] = [None if it is None or it != it else int(it) - 1
                                      for it in df.loc[pairs, "iteration"]]
        df.loc[pairs, ["label", "method"]] = None
    df["schema_version"] = 3
    return df


_UPGRADES = {1: _upgrade_v1, 2: _upgrade_v2}


def upgrade(df, version: int, source: str, meta: dict | None = None):
    """Bring a frame read from `source` (a file name, for messages) at `version` up to SCHEMA_VERSION;
    `meta` is the run metadata of the same file's footer."""
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{source}: written with store schema v{version}, this evalsuite reads up to "
            f"v{SCHEMA_VERSION}; upgrade evalsuite to read it"
        )
    while version < SCHEMA_VERSION:
        if version not in _UPGRADES:
            raise UserError(f"{source}: unknown store schema v{version}")
        df = _UPGRADES[version](df, meta or {})
        version += 1
    missing = [c for c in COLUMN_NAMES if c not in df.columns]
    if missing:
        raise UserError(f"{source}: schema v{SCHEMA_VERSION} file lacks columns {missing}")
    return df[COLUMN_NAMES]
