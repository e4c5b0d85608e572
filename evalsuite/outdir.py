"""An output directory that belongs to one evaluation run: OUT/run.json says which, OUT/.lock who writes.

    out = OutputDir(path)
    run_id = out.existing_run(config, ckpt_hash) or new_run_id()   # a check: no file is written
    ...                                                            # every other check, then
    run_id = out.claim(meta, config, ckpt_hash)                    # when the first task starts
    ...
    out.release()

A directory is resumed when its run.json holds the same configuration and checkpoint hash; a
non-empty directory holding anything else is refused with one line naming the flag. The lock is an
flock on OUT/.lock: the kernel drops it when its process dies (kill -9 included), and a second process
trying to write into the same directory while the first runs is refused.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from evalsuite.errors import UserError

LOCK = ".lock"
# settings of an evaluation that change its speed only (identity=False fields of EvalConfig, checked by a
# test): a rerun that changes them resumes the same run
EVAL_SPEED_KEYS = ("batch_size", "relevance.batch_size", "vllm.data_parallel_size", "vllm.gpu_memory_utilization",
                   "vllm.kv_cache_gib", "vllm.prefix_caching", "vllm.start_timeout_s")


def differences(old, new, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two plain (JSON-like) mappings."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [prefix.rstrip(".") or "config"]
    out: list[str] = []
    for key in sorted(set(old) | set(new), key=str):
        out += differences(old.get(key), new.get(key), f"{prefix}{key}.")
    return out


def shown_differences(diff: list[str]) -> str:
    """`differences` as a message shows them: the first four, then "..."."""
    return ", ".join(diff[:4]) + (", ..." if len(diff) > 4 else "")


def shown_changes(old, new, diff: list[str] | None = None) -> str:
    """The differing keys with their old and new values, "k: old -> new", the first four, then "..."."""
    def at(d, key):
        for k in key.split("."):
            d = d.get(k) if isinstance(d, dict) else None
        return d

    diff = differences(old, new) if diff is None else diff
    parts = [f"{k}: {json.dumps(at(old, k), default=str)} -> {json.dumps(at(new, k), default=str)}" for k in diff[:4]]
    return ", ".join(parts) + (", ..." if len(diff) > 4 else "")


def upgraded_config(config):
    """A run.json config written by an earlier release, in today's spelling, so that the same settings
    resume: the prompt settings that moved into `inputs:` (evalsuite/models/inputs.py MOVED_TO_INPUTS)."""
    from evalsuite.models.inputs import MOVED_TO_INPUTS

    if not isinstance(config, dict) or not any(k in config for k in MOVED_TO_INPUTS):
        return config
    config = dict(config)
    inputs = dict(config.get("inputs") or {})
    for key in MOVED_TO_INPUTS:
        if key in config:
            inputs.setdefault(key, config.pop(key))
    config["inputs"] = inputs
    return config


class OutputDir:
    def __init__(self, path: str | os.PathLike, flag: str = "--output"):
        self.path = Path(path)
        self.flag = flag
        self._fd: int | None = None

    def existing_run(self, config: dict, ckpt_hash: str, model_id: str | None = None) -> str | None:
        """The run id this directory holds when it is this same run (resume), None when it is new or
        empty; a UserError when it holds anything else. `model_id`: evalsuite/identity.py ModelId.key()."""
        p, flag = self.path, self.flag
        if not p.exists():
            return None
        if not p.is_dir():
            raise UserError(f"{flag} {p}: is not a directory")
        if not any(e.name != LOCK for e in p.iterdir()):
            return None
        try:
            old = json.loads((p / "run.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{flag} {p}: not empty and not an evalsuite run directory (no run.json); "
                            "pass a new or empty directory") from None
        except (OSError, ValueError) as e:
            raise UserError(f"{flag} {p}: run.json unreadable ({e}); pass a new or empty directory") from None
        if not isinstance(old, dict) or not old.get("run_id"):
            raise UserError(f"{flag} {p}: run.json names no run; pass a new or empty directory")
        diff = [d for d in differences(upgraded_config(old.get("config")), config) if d not in EVAL_SPEED_KEYS]
        if old.get("ckpt_hash") != ckpt_hash:
            diff.insert(0, "the checkpoint's weights")
        elif model_id is not None and old.get("model_id") not in (None, model_id):
            diff.insert(0, "the checkpoint's prompt files (chat template, tokenizer, processor configs)")
        if diff:
            shown = shown_differences(diff)
            raise UserError(f"{flag} {p}: holds run {old['run_id']} of another configuration ({shown} differ); "
                            "pass another directory, or the same settings to resume it")
        return str(old["run_id"])

    def claim(self, meta: dict, config: dict, ckpt_hash: str) -> str:
        """Take the lock, then write run.json unless the directory already holds this run; the run id."""
        import fcntl

        from evalsuite.files import write_json_atomic

        created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(f"{self.flag} {self.path}: another evalsuite run is writing there now") from None
        self._fd = fd
        try:
            # again under the lock: a run may have started since
            resumed = self.existing_run(config, ckpt_hash, meta.get("model_id"))
            if not resumed:
                write_json_atomic(self.path / "run.json", meta)
        except OSError as e:  # e.g. the disk is full: one line, and no directory holding only our lock
            self.release()
            if created and not any(p.name != LOCK for p in self.path.iterdir()):
                (self.path / LOCK).unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    self.path.rmdir()
            raise UserError(f"{self.flag} {self.path}: cannot write run.json ({e.strerror or e}); "
                            "nothing was run") from None
        except BaseException:
            self.release()
            raise
        return resumed or str(meta["run_id"])

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def summary(self) -> dict:
        """summary.json of a resumed run ({} when there is none)."""
        try:
            data = json.loads((self.path / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}
