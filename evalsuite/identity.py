"""What makes two answers, or two numbers, the same: declared once, used by every cache and by store reuse.

    digest(obj)                  the one canonical JSON hash (sorted keys at every level, compact): a dict
                                 in any key order gives one digest
    file_sha256(path)            the one file-hash memo, keyed by (resolved path, size, mtime_ns)
    ModelId.of(ckpt, inputs, device, dtype)
                                 what a model's answers depend on: the weights, the prompt files beside
                                 them (chat_template.jinja, tokenizer_config.json with its chat template,
                                 processor and generation configs), the prompt settings, device type and
                                 dtype. `.key()` keys the own-task answer cache (tasks/answers.py), the
                                 lmms-eval response cache (models/backend.py) and store reuse (run.py), so
                                 editing a checkpoint's chat template makes every task recompute.
    options_identity(opts)       a task's options that change its numbers: every dataclass field, except
                                 those marked `metadata={"identity": False}` (e.g. chair.n_boot, which only
                                 changes a confidence interval). A new option is part of the identity
                                 unless it says otherwise.
    gen_identity(gen)            generation settings as a typed dict (never the text the user typed), so
                                 `max_new_tokens=16,temperature=0` in either order is one identity.
    EvalIdentity(task, version, fields)
                                 the frozen identity of one result; `.key()` is its eval_key (types.eval_key).

No heavy import here: entry points and `--dry-run` stay fast.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
# files beside the weights that shape an answer: configs, tokenizer, processor, chat template
PROMPT_FILE_SUFFIXES = (".json", ".jinja", ".model", ".txt", ".tiktoken")
# ... except metadata no model reads: the evalsuite manifest, trainer state, the weights' own index
SKIPPED_FILES = ("evalsuite.json", "trainer_state.json")


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    return str(obj)


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys at every level and no whitespace: equal data, equal text."""
    return json.dumps(obj, sort_keys=True, default=_default, separators=(",", ":"))


def digest(obj: Any, n: int = 16) -> str:
    """sha256 (first `n` hex) of canonical_json(obj)."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:n]


@functools.lru_cache(maxsize=1024)
def _file_sha(path: str, size: int, mtime_ns: int) -> str:
    from evalsuite.files import sha256_file

    return sha256_file(path)


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, computed once per (resolved path, size, mtime) within a process."""
    p = Path(path).resolve()
    st = p.stat()
    return _file_sha(str(p), st.st_size, st.st_mtime_ns)


def file_fingerprint(paths) -> dict[str, str]:
    """{file name: sha256 (16 hex)} of data files."""
    return {Path(p).name: file_sha256(p)[:16] for p in paths}


def weight_files(ckpt: str | Path) -> list[Path]:
    return sorted(p for p in Path(ckpt).iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))


def checkpoint_hash(ckpt: str | Path) -> str:
    """Content hash of a checkpoint's weights: sha256 over its (weight file name, sha256) pairs, always
    from the bytes on disk, so it describes what was evaluated even when a manifest is stale."""
    h = hashlib.sha256()
    for p in weight_files(ckpt):
        h.update(f"{p.name}:{file_sha256(p)}\n".encode())
    return h.hexdigest()[:16]


def prompt_files(ckpt: str | Path) -> list[Path]:
    """A checkpoint's non-weight files that change answers without changing the weights' hash."""
    return sorted(p for p in Path(ckpt).iterdir()
                  if p.is_file() and p.suffix in PROMPT_FILE_SUFFIXES and p.name not in SKIPPED_FILES
                  and not p.name.endswith(".index.json"))


def prompt_files_id(ckpt: str | Path) -> str:
    """Fingerprint of `prompt_files(ckpt)` by content."""
    return digest(file_fingerprint(prompt_files(ckpt)))


def inputs_identity(inputs) -> dict[str, Any]:
    """The prompt settings (an evalsuite.models.inputs.InputConfig, or None) that change answers, by
    content: the template file's hash, not its path; {} for the defaults."""
    return {} if inputs is None else inputs.identity()


@dataclass(frozen=True)
class ModelId:
    """What a model's answers depend on. Two runs may share cached answers or a stored result only when
    their ModelIds are equal."""

    weights: str                        # evalsuite.manifest.checkpoint_hash
    prompt_files: str                   # prompt_files_id
    inputs: dict = field(default_factory=dict)   # inputs_identity
    device: str = "cpu"                 # device type (every GPU answers alike)
    dtype: str | None = None
    engine: dict = field(default_factory=dict)   # {} = HF generate; else the engine and its versions

    @classmethod
    def of(cls, ckpt: str | Path, inputs=None, device: str = "cpu", dtype: str | None = None,
           engine: dict | None = None) -> ModelId:
        return cls(checkpoint_hash(ckpt), prompt_files_id(ckpt), inputs_identity(inputs), device, dtype,
                   dict(engine or {}))

    def key(self) -> str:
        d = dataclasses.asdict(self)
        if not d["engine"]:   # HF generate: the key of a ModelId without engines
            del d["engine"]
        return digest(d)


def options_identity(opts: Any) -> dict[str, Any]:
    """The fields of an options dataclass that are part of a result's identity: all of them, nested
    sections included, except those with `metadata={"identity": False}`."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(opts):
        if f.name.startswith("_") or not f.metadata.get("identity", True):
            continue
        value = getattr(opts, f.name)
        out[f.name] = options_identity(value) if dataclasses.is_dataclass(value) else value
    return out


def scheduling_keys(cls: Any, prefix: str = "") -> set[str]:
    """Dotted keys of the fields of options class `cls` (sections recursed) marked identity=False: settings
    that give the same results, so a rerun or resume that changes only them is the same run."""
    import typing

    out: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.metadata.get("identity", True):
            out.add(prefix + f.name)
            continue
        sub = next((a for a in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(a)), None)
        if sub is not None:
            out |= scheduling_keys(sub, f"{prefix}{f.name}.")
    return out


def gen_identity(gen: Any) -> dict[str, Any] | None:
    """Generation settings as a typed dict (a GenConfig / dataclass, or a mapping already typed, e.g. by
    evalsuite.run_config.parse_gen_kwargs), never the text the user typed; None or {} is None."""
    if gen is None:
        return None
    if dataclasses.is_dataclass(gen):
        return dataclasses.asdict(gen)
    if not isinstance(gen, dict):
        raise TypeError(f"generation settings: expected a mapping, got {type(gen).__name__}")
    return dict(sorted(gen.items())) or None


@dataclass(frozen=True)
class EvalIdentity:
    """The identity of one result: everything that can change its numbers besides the checkpoint."""

    task: str
    version: str
    fields: dict

    def key(self) -> str:
        """The eval_key: sha256 (16 hex) of canonical JSON of task, version and fields."""
        return digest({"task": self.task, "version": str(self.version), "identity": self.fields})
