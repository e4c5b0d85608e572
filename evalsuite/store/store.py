"""Append-only results store: one Parquet file per write, published by an atomic no-clobber link.

Layout of a store directory (default `results/`):

    STORE/store.json                         {"format": "evalsuite-store", "schema": N}
    STORE/metrics/<run_id>.parquet           long-format metric rows of one run (see schema.py);
                                             the run's metadata (config, versions, task configs) sits
                                             in the Parquet footer under `evalsuite.run`
    STORE/samples/<run_id>-<token>.parquet   per-sample records of that run: run_id, task, key,
                                             image_id, image, prompt, answer, record (JSON text)

Why Parquet files and not SQLite (both lost no rows in the concurrency test the issue reports): with
one file per write, a corrupt file spoils one run and nothing else, a writer needs no lock at all,
and the whole store reads with one pandas call:

    pandas.read_parquet("results/metrics")      # every metric row (files of one schema version)
    pandas.read_parquet("results/samples")      # every per-sample record

`Store(path).snapshot().metrics()` does the same but also upgrades files of older schema versions and names
a corrupt file in a `UserError`: `Store` is the writer, and its readers are on the `Snapshot`. A write is committed when its metrics file appears; the samples file is written
first, so a killed writer leaves at most an unreferenced samples file (ignored) and never a partial row.
Temp files start with "." so pandas/pyarrow directory reads skip them.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import re
import secrets
import uuid
from pathlib import Path
from typing import Iterable

from evalsuite.errors import UserError
from evalsuite.files import write_bytes_atomic
from evalsuite.safeio import loads_json
from evalsuite.store import schema
from evalsuite.types import TaskResult

log = logging.getLogger(__name__)

META_KEY = b"evalsuite.run"
SCHEMA_KEY = b"evalsuite.schema"
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SAMPLE_COLUMNS = ["run_id", "task", "key", "image_id", "image", "prompt", "answer", "record"]


def new_run_id(now: _dt.datetime | None = None) -> str:
    """The one run-id rule (eval run folders, and store runs written without an id): UTC time to the
    second and 6 random hex digits, `20260101-120000-a1b2c3`, so ids sort by time."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def config_hash(config: dict | None) -> str:
    """sha256 (first 16 hex) of the config as canonical JSON: equal configs, equal hashes."""
    from evalsuite.identity import digest

    return digest(config or {})


def _publish(path: Path, data: bytes) -> None:
    """Publish `data` at `path` whole or not at all, never over an existing run's file."""
    try:
        write_bytes_atomic(path, data, overwrite=False)
    except FileExistsError:
        raise UserError(f"{path}: run id already in the store; pick another run_id") from None


def _parquet_bytes(table) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def _opt_str(v) -> str | None:
    return None if v is None else str(v)


def refuse_empty(results: list[TaskResult]) -> None:
    """The store's last line of defence against numbers computed from nothing: a metric with n == 0,
    or a result with no per-sample record and no metric saying it covered any sample."""
    def count(m) -> int | None:
        try:
            return None if m.n is None or isinstance(m.n, bool) else int(m.n)
        except (TypeError, ValueError):
            return None

    for r in results:
        empty = [m.metric for m in r.metrics if count(m) == 0]
        if empty:
            raise UserError(f"{r.task}: metric {empty[0]} was computed from 0 samples; "
                            "refusing to store it")
        if not r.samples and not any((count(m) or 0) > 0 for m in r.metrics):
            raise UserError(f"{r.task}: the task produced no samples; refusing to store its metrics")


def _damaged_meta(meta) -> str | None:
    """What is wrong with a metrics file's footer metadata (None when it is usable)."""
    if not isinstance(meta, dict):
        return f"footer run metadata is a JSON {type(meta).__name__}, not an object"
    for key, kinds in (("run_id", (str,)), ("samples_file", (str, type(None))), ("tasks", (dict,)),
                       ("config", (dict,)), ("data_root", (str, type(None)))):
        if key in meta and not isinstance(meta[key], kinds):
            return f"footer field {key!r} has type {type(meta[key]).__name__}"
    if any(not isinstance(d, dict) for d in (meta.get("tasks") or {}).values()):
        return "footer field 'tasks' holds a non-object entry"
    return None


class Store:
    """A results store at `path` (created on first write)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.metrics_dir = self.path / "metrics"
        self.samples_dir = self.path / "samples"

    # ---- writing -------------------------------------------------------------------------------
    def write_run(self, meta: dict, results: Iterable[TaskResult]) -> str:
        """Append one run: a row per MetricValue of every result, and its per-sample records."""
        import pyarrow as pa

        results = list(results)
        refuse_empty(results)
        meta = dict(meta)
        run_id = str(meta.get("run_id") or new_run_id())
        if not _RUN_ID_RE.match(run_id):
            raise UserError(f"run_id {run_id!r}: use letters, digits, '.', '_' and '-' only")
        iteration = meta.get("iteration")
        if iteration is not None and (isinstance(iteration, bool) or not isinstance(iteration, int)):
            raise UserError(f"meta.iteration: expected an int or None, got {iteration!r}")
        written_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")
        meta.update(run_id=run_id, written_at=written_at, config_hash=config_hash(meta.get("config")))
        meta.setdefault("created_at", written_at)
        if not meta.get("code_version"):
            from evalsuite.version import code_version

            meta["code_version"] = code_version()
        self.metrics_dir.mkdir(parents=True, exist_ok=True)
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        target = self.metrics_dir / f"{run_id}.parquet"
        if target.exists():
            raise UserError(f"{target}: run id already in the store; pick another run_id")
        self._write_marker()

        meta["samples_file"] = self._write_samples(run_id, results)
        meta["tasks"] = {r.task: {"version": str(r.version), "config": r.config, "extra": r.extra,
                                  "num_samples": len(r.samples), "eval_key": r.eval_key,
                                  "identity": r.identity} for r in results}
        rows = self._rows(meta, results)
        table = pa.Table.from_pylist(rows, schema=schema.arrow_schema())
        table = table.replace_schema_metadata({
            META_KEY: json.dumps(meta, default=str).encode("utf-8"),
            SCHEMA_KEY: str(schema.SCHEMA_VERSION).encode(),
        })
        _publish(target, _parquet_bytes(table))
        log.info("store %s: wrote run %s (%d metric rows)", self.path, run_id, len(rows))
        return run_id

    def write_run_once(self, meta: dict, results: list[TaskResult], ckpt_hash: str, dedup: bool = True) -> str:
        """write_run, unless (with `dedup`) the store already holds a result of the same checkpoint and
        eval_key: that run's id is returned instead. The check and the write are made under one lock
        (STORE/.store.lock, an flock), so concurrent runs of one task store it once."""
        import fcntl

        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / ".store.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if dedup:
                keys = [r.eval_key for r in results]
                found = [self.has_result(ckpt_hash, k) for k in keys if k]
                if found and all(found):
                    return found[0]
            return self.write_run(meta, results)
        finally:
            os.close(fd)

    def _write_marker(self) -> None:
        from evalsuite.files import write_json_atomic

        marker = self.path / "store.json"
        if not marker.exists():
            write_json_atomic(marker, {"format": "evalsuite-store", "schema": schema.SCHEMA_VERSION})

    @staticmethod
    def _rows(meta: dict, results: list[TaskResult]) -> list[dict]:
        from evalsuite.version import code_version

        base = {
            "schema_version": schema.SCHEMA_VERSION, "run_id": meta["run_id"],
            "written_at": meta["written_at"], "created_at": _opt_str(meta["created_at"]),
            "label": _opt_str(meta.get("label")), "ckpt": _opt_str(meta.get("ckpt")),
            "ckpt_hash": _opt_str(meta.get("ckpt_hash")), "iteration": meta.get("iteration"),
            "method": _opt_str(meta.get("method")), "parent": _opt_str(meta.get("parent")),
            "generator": _opt_str(meta.get("generator")), "config_hash": meta["config_hash"],
            "evalsuite_version": _opt_str(meta.get("code_version")) or code_version(),
            "lmms_eval_version": _opt_str(meta.get("lmms_eval_version")),
        }
        rows = []
        for r in results:
            setup = json.dumps(r.identity, default=str)     # the task's field order: labels follow it
            for m in r.metrics:
                rows.append({**base, "task": r.task, "task_version": str(r.version), "eval_key": r.eval_key,
                             "eval_setup": setup, "metric": m.metric,
                             "variant": m.variant, "value": float(m.value), "ci_low": m.ci_low,
                             "ci_high": m.ci_high, "n": m.n, "stderr": m.stderr,
                             "higher_is_better": bool(m.higher_is_better)})
        return rows

    def _write_samples(self, run_id: str, results: list[TaskResult]) -> str | None:
        import pyarrow as pa

        from evalsuite.files import write_bytes_atomic

        rows = []
        for r in results:
            for s in r.samples:
                rows.append({"run_id": run_id, "task": r.task, "key": _opt_str(s.get("key")),
                             "image_id": _opt_str(s.get("image_id", s.get("id"))),
                             "image": _opt_str(s.get("image")), "prompt": _opt_str(s.get("prompt")),
                             "answer": _opt_str(s.get("answer")),
                             "record": json.dumps(s, default=str)})
        if not rows:
            return None
        name = f"{run_id}-{uuid.uuid4().hex[:8]}.parquet"
        table = pa.Table.from_pylist(rows, schema=pa.schema([(c, pa.string()) for c in SAMPLE_COLUMNS]))
        write_bytes_atomic(self.samples_dir / name, _parquet_bytes(table))
        return name

    # ---- reading -------------------------------------------------------------------------------
    def has_result(self, ckpt_hash: str, eval_key: str, model_id: str | None = None) -> str | None:
        """The run id of a committed result of evaluation `eval_key` on checkpoint `ckpt_hash`, else None.
        With `model_id` (evalsuite/identity.py ModelId.key(): weights plus prompt files and settings),
        only a run that recorded the same one counts: an edited chat template is not the same model.

        Reads only the Parquet footers (`tasks[..]["eval_key"]`, written by write_run), each file's once
        per process (`_footer`); files that cannot be read are skipped here (the table/report commands
        name them)."""
        for path in metric_files(self.metrics_dir):
            f = _footer(path)
            if f is None or f["ckpt_hash"] != ckpt_hash:
                continue
            if model_id is not None and f["model_id"] != model_id:
                continue
            if eval_key in f["eval_keys"]:
                return f["run_id"]
        return None

    def snapshot(self) -> "Snapshot":
        """The store read once: every reader (`runs`, `run_meta`, `metrics`, `samples`) is on the snapshot."""
        return Snapshot(self.path, *_load(self.metrics_dir))

    def __getattr__(self, name):
        if name in _READERS:      # the readers live on the snapshot only: say where
            raise AttributeError(f"Store.{name}: read through Store.snapshot().{name}()")
        raise AttributeError(name)


_READERS = {"runs", "run_meta", "select_runs", "metrics", "samples", "sample_records"}

# (file, mtime_ns, size) -> what has_result needs of its footer (None: unreadable). Published files never
# change (no-clobber), so a footer is read once per process; a new or replaced file has a new key.
_FOOTERS: dict[tuple, dict | None] = {}


def _footer(path: Path) -> dict | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key in _FOOTERS:
        return _FOOTERS[key]
    try:
        md = pq.read_schema(path).metadata or {}
        meta = loads_json(md.get(META_KEY, b"{}"), "footer")  # depth-limited: a crafted footer is one line
    except (pa.ArrowException, OSError, ValueError) as e:
        # a run into this store must not pass a damaged file in silence (table/report refuse it)
        log.warning("%s: not a readable store file (%s); the already-stored check skips it: move it "
                    "out of the store", path, (str(e).splitlines() or [type(e).__name__])[0][:200])
        _FOOTERS[key] = None
        return None
    out = None
    if isinstance(meta, dict):
        tasks = meta.get("tasks") if isinstance(meta.get("tasks"), dict) else {}
        out = {"run_id": str(meta.get("run_id") or path.stem), "ckpt_hash": meta.get("ckpt_hash"),
               "model_id": meta.get("model_id"),
               "eval_keys": {t["eval_key"] for t in tasks.values() if isinstance(t, dict) and t.get("eval_key")}}
    _FOOTERS[key] = out
    return out


def metric_files(metrics_dir: Path) -> list[Path]:
    if not metrics_dir.is_dir():
        return []
    return sorted(p for p in metrics_dir.glob("*.parquet") if not p.name.startswith("."))


def read_file(path: Path):
    """(table, meta, schema version) of one metrics file; a damaged file is a UserError naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable store file ({e}); move it out of the store "
                        "to read the other runs (they are untouched)") from None
    md = table.schema.metadata or {}
    try:
        meta = loads_json(md.get(META_KEY, b"{}"), "footer")  # depth-limited: a crafted footer is one line
        version = int(md.get(SCHEMA_KEY, b"0"))
    except ValueError as e:
        raise UserError(f"{path}: damaged run metadata in the Parquet footer ({e})") from None
    problem = _damaged_meta(meta)
    if problem:
        raise UserError(f"{path}: damaged store file ({problem}); move it out of the store "
                        "to read the other runs")
    if not version and "schema_version" in table.column_names and table.num_rows:
        version = int(table.column("schema_version")[0].as_py())
    if not version:
        raise UserError(f"{path}: no store schema version in the file")
    return table, meta, version


def _load(metrics_dir: Path) -> tuple[object, list[tuple[Path, dict]]]:
    """Every committed run: (all metric rows upgraded to the current schema, [(file, meta)]), both in
    store (write) order. Files of the current schema are converted to pandas together (one conversion for
    thousands of small runs); older ones are upgraded one by one."""
    import pandas as pd
    import pyarrow as pa

    entries = []
    for path in metric_files(metrics_dir):
        table, meta, version = read_file(path)
        meta = dict(meta)
        meta.setdefault("run_id", path.stem)
        meta.setdefault("written_at", meta.get("created_at"))
        current = version == schema.SCHEMA_VERSION and set(schema.COLUMN_NAMES) <= set(table.column_names)
        entries.append((path, meta, table.select(schema.COLUMN_NAMES) if current else _upgraded(path, table, version, meta)))
    entries.sort(key=lambda t: (str(t[1].get("written_at") or ""), str(t[1]["run_id"])))
    pieces, batch = [], []
    for _, _, data in entries:
        if isinstance(data, pa.Table):
            batch.append(data)
            continue
        if batch:
            pieces.append(_arrow_frame(batch))
            batch = []
        pieces.append(data)
    if batch:
        pieces.append(_arrow_frame(batch))
    pieces = [p for p in pieces if len(p)]
    frame = pd.concat(pieces, ignore_index=True) if pieces else \
        pd.DataFrame({c: pd.Series(dtype="object") for c in schema.COLUMN_NAMES})
    return frame, [(path, meta) for path, meta, _ in entries]


def _arrow_frame(tables: list):
    import pyarrow as pa

    try:
        return pa.concat_tables(tables, promote_options="default").to_pandas()
    except (pa.ArrowInvalid, pa.ArrowTypeError):     # a file of odd column types: convert it alone
        import pandas as pd

        return pd.concat([t.to_pandas() for t in tables], ignore_index=True)


def _upgraded(path: Path, table, version: int, meta: dict):
    try:
        return schema.upgrade(table.to_pandas(), version, str(path), meta)
    except (KeyError, TypeError, ValueError) as e:   # a column the upgrade needs is absent/odd
        raise UserError(f"{path}: damaged schema v{version} store file ({type(e).__name__}: {e}); "
                        "move it out of the store to read the other runs") from None


def read_samples_file(samples_dir: Path, name: str, task: str | None, fields=None) -> list[dict]:
    """The records of one samples file, which must lie directly in STORE/samples; with `fields`, only those
    keys of each record (what a statistic reads of thousands of runs, not what a page shows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = samples_dir.resolve()
    path = (samples_dir / name).resolve()
    if path.parent != root:
        raise UserError(f"samples_file {name!r} points outside {samples_dir} (damaged footer)")
    if not path.is_file():
        raise UserError(f"{samples_dir / name}: samples file missing")
    try:
        table = pq.read_table(path, columns=["run_id", "task", "record"],
                              filters=[("task", "=", task)] if task else None)
        out = []
        for rid, t, rec in zip(*(table.column(c).to_pylist() for c in ("run_id", "task", "record"))):
            rec = loads_json(rec, "record")
            if fields is not None:
                rec = {k: rec[k] for k in fields if k in rec}
            out.append({**rec, "run_id": rid, "task": t})
        return out
    except (pa.ArrowException, OSError, ValueError, TypeError) as e:
        raise UserError(f"{samples_dir / name}: samples file unreadable "
                        f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None


def samples_frame(records: list[dict]):
    """Records (dicts with run_id and task) as a frame, run_id and task first; absent fields are NaN."""
    import pandas as pd

    if not records:
        return pd.DataFrame(columns=["run_id", "task", "key", "image_id", "image", "prompt", "answer"])
    df = pd.DataFrame.from_records(records)
    front = ["run_id", "task"]
    return df[front + [c for c in df.columns if c not in front]]


class Snapshot:
    """A store read once (`Store.snapshot()`): every metrics file decoded a single time, then answered
    from memory, so a report that needs rows, run metadata and samples reads the store once. The
    store's only readers."""

    def __init__(self, path: str | os.PathLike, frame, runs: list[tuple[Path, dict]]):
        self.path, self.frame, self._runs = Path(path), frame, runs     # frame: every metric row, store order
        self.samples_dir = self.path / "samples"

    def runs(self):
        """One row per write, in store order: `version` (1, 2, ...) selects the table as of that write."""
        import pandas as pd

        per = self.frame.groupby("run_id", sort=False)["task"]
        counts, tasks = per.size().to_dict(), per.agg(lambda t: ",".join(sorted(set(t)))).to_dict()
        rows = []
        for i, (_, meta) in enumerate(self._runs, start=1):
            rows.append({
                "version": i, "run_id": meta["run_id"], "written_at": meta.get("written_at"),
                "created_at": meta.get("created_at"), "label": meta.get("label"),
                "ckpt": meta.get("ckpt") or meta.get("checkpoint"), "ckpt_hash": meta.get("ckpt_hash"),
                "iteration": meta.get("iteration"), "method": meta.get("method"),
                "tasks": tasks.get(meta["run_id"], ""), "num_rows": counts.get(meta["run_id"], 0),
            })
        cols = ["version", "run_id", "written_at", "created_at", "label", "ckpt", "ckpt_hash",
                "iteration", "method", "tasks", "num_rows"]
        out = pd.DataFrame(rows, columns=cols)
        out["iteration"] = out["iteration"].astype("Int64")
        return out

    def run_meta(self, run_id: str | None = None) -> dict | list[dict]:
        """The stored metadata (config, versions, task configs) of `run_id`, or of every run."""
        metas = [m for _, m in self._runs]
        if run_id is None:
            return metas
        for m in metas:
            if m["run_id"] == run_id:
                return m
        raise UserError(f"run {run_id!r}: not in store {self.path}")

    def select_runs(self, as_of: int | str | None = None, runs: Iterable[str] | None = None) -> list[str]:
        """Run ids visible in store version `as_of` (a version number or a run id), limited to `runs`."""
        ids = [m["run_id"] for _, m in self._runs]
        if as_of is not None:
            if isinstance(as_of, int) or str(as_of).lstrip("-").isdigit():
                v = int(as_of)
                if v < 0:
                    v = len(ids) + v      # -1: the version before the latest write
                if not 1 <= v <= len(ids):
                    raise UserError(f"--version {as_of}: the store has versions 1..{len(ids)}")
                ids = ids[:v]
            elif as_of in ids:
                ids = ids[: ids.index(as_of) + 1]
            else:
                raise UserError(f"--version {as_of!r}: neither a version number nor a run id in the store")
        if runs:
            wanted = list(runs)
            unknown = [r for r in wanted if r not in ids]
            if unknown:
                raise UserError(f"--run {unknown[0]!r}: not in store {self.path} (at this version)")
            ids = [r for r in ids if r in wanted]
        return ids

    def metrics(self, as_of: int | str | None = None, runs: Iterable[str] | None = None):
        """Every metric row (long format, current schema), in store order; see `select_runs`."""
        import pandas as pd

        df = self.frame
        if as_of is not None or runs:
            df = df[df["run_id"].isin(set(self.select_runs(as_of, runs)))].reset_index(drop=True)
        else:
            df = df.copy()
        df["iteration"] = df["iteration"].astype("Int64")
        df["n"] = df["n"].astype("Int64")
        return df

    def samples(self, task: str | None = None, run_id: str | Iterable[str] | None = None,
                problems: list[str] | None = None):
        """Per-sample records as a frame: run_id, task, then every field of the records (they vary by
        task; absent fields are NaN). Records come from committed runs only; only the samples files
        of the `run_id`s asked for are read.

        A run whose samples file is missing, unreadable or named outside STORE/samples (a crafted or
        damaged footer) is skipped with a warning, and described in `problems` when a list is given:
        the other runs' records still load."""
        return samples_frame(self.sample_records(task, run_id, problems))

    def sample_records(self, task: str | None = None, run_id: str | Iterable[str] | None = None,
                       problems: list[str] | None = None, fields: Iterable[str] | None = None) -> list[dict]:
        """What `samples` returns, as plain dicts (each with run_id and task), in store order; `fields`
        keeps only those keys of each record."""
        wanted = {run_id} if isinstance(run_id, str) else (set(run_id) if run_id is not None else None)
        records = []
        for path, meta in self._runs:
            name = meta.get("samples_file")
            if not name or (wanted is not None and meta["run_id"] not in wanted):
                continue
            try:
                records += read_samples_file(self.samples_dir, name, task, fields)
            except UserError as e:
                msg = f"run {meta['run_id']} ({path.name}): per-sample records not shown: {e}"
                log.warning("%s", msg)
                if problems is not None:
                    problems.append(msg)
        return records
