"""Read local record files: a JSON list, JSON Lines, parquet, or a snapshot directory of those.

Errors name the file (and line for JSON) so a user can fix the data, never a traceback.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from evalsuite.errors import UserError
from evalsuite.files import read_json_records

SUFFIXES = (".json", ".jsonl", ".parquet")


def data_files(path: str | Path) -> list[Path]:
    """The files behind `--data_path`: the file itself, or every json/jsonl/parquet under a directory."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.suffix in SUFFIXES and f.is_file() and ".cache" not in f.parts)
        if not files:
            raise UserError(f"data_path: no .json/.jsonl/.parquet files under {str(p)!r}")
        return files
    raise UserError(f"data_path: no such file or directory {str(p)!r}")


def read_records(path: Path) -> list[dict[str, Any]]:
    """All records of one file, each a dict; anything else is a UserError naming the file."""
    if path.suffix == ".parquet":
        return _read_parquet(path)
    rows = [r for _, r in read_json_records(path, "records", jsonl=path.suffix == ".jsonl", unwrap="data")]
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UserError(f"{path}[{i}]: expected an object, got {type(row).__name__}")
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise UserError(f"{path}: unreadable parquet ({str(e).splitlines()[0]})") from None
