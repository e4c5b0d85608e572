"""Per-sample response cache: a killed run keeps every finished batch, the rerun regenerates only the rest.

lmms-eval's own response cache stores answers only after the model's whole `generate_until(all
requests)` call returns, so a crash at sample 900 of 1000 loses all 900. This cache is written by the
model wrapper after every batch instead.

Layout: `ROOT/<checkpoint hash>/<task>.rank<R>.jsonl`, one JSON object per line:
`{"key": sha256, "doc_id": int, "type": "generate_until", "response": ...}`.

- Append-only, one `write()` + fsync per batch: a kill can at worst leave a truncated last line, which
  the reader skips (and the next writer first terminates with a newline so it cannot swallow a record).
- One file per rank, so data-parallel ranks never interleave writes; readers merge all ranks' files.
- The key covers (checkpoint hash, task, request type, doc id, prompt text, generation args): the
  same doc id with another prompt template or `--gen-kwargs` is a different entry.
"""
from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable

log = logging.getLogger(__name__)

_MISSING = object()


def request_key(ckpt_hash: str, task: str, request_type: str, doc_id: int, prompt: str, gen_args: dict) -> str:
    """Stable sha256 over everything that determines one answer (dict order does not matter)."""
    from evalsuite.identity import digest

    return digest([ckpt_hash, task, request_type, int(doc_id), prompt, gen_args], 64)


def _safe_name(task: str) -> str:
    # task names become file names; lmms-eval names are [a-z0-9_-] but keep this robust
    return re.sub(r"[^A-Za-z0-9_.-]", "_", task)


class ResponseCache:
    """The finished answers of one (checkpoint, task), readable across ranks, appendable by one rank."""

    def __init__(self, root: str | os.PathLike, ckpt_hash: str, task: str, rank: int = 0):
        self.dir = Path(root) / ckpt_hash
        self.task = task
        self.rank = rank
        self.path = self.dir / f"{_safe_name(task)}.rank{rank}.jsonl"
        self._entries: dict[str, Any] = {}
        self.hits = 0
        self.written = 0
        self._load()

    def _load(self) -> None:
        if not self.dir.is_dir():
            return
        from evalsuite.safeio import read_jsonl_records

        for path in sorted(self.dir.glob(f"{_safe_name(self.task)}.rank*.jsonl")):
            # a torn last line of a killed writer, or bytes that are not UTF-8, are skipped with a
            # warning naming the file, never fatal: the cache only saves work
            for rec in read_jsonl_records(path, "cache"):
                if isinstance(rec.get("key"), str) and "response" in rec:
                    self._entries[rec["key"]] = rec["response"]
        log.info("response cache %s/%s: %d finished answers", self.dir, self.task, len(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str, default: Any = None) -> Any:
        value = self._entries.get(key, _MISSING)
        if value is _MISSING:
            return default
        self.hits += 1
        return value

    def put_many(self, records: Iterable[tuple[str, int, str, Any]]) -> None:
        """Append (key, doc_id, request_type, response) records as one durable write."""
        lines = []
        for key, doc_id, rtype, response in records:
            lines.append(json.dumps({"key": key, "doc_id": int(doc_id), "type": rtype, "response": response}))
            self._entries[key] = response
        if not lines:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        data = ("\n".join(lines) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if _ends_without_newline(self.path):
                data = b"\n" + data
            view = memoryview(data)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        self.written += len(lines)


def _ends_without_newline(path: Path) -> bool:
    size = path.stat().st_size
    if size == 0:
        return False
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) != b"\n"
