"""Where an lmms-eval task's documents come from, offline: a dataset override, or a clear error.

Pure path logic (no lmms_eval import). The forms a user can map a task to (`lmms.data.<task>: PATH`
in the eval config), besides the world of `--data-root` for evalsuite's local tasks:

| PATH                                   | lmms-eval dataset override                                   |
|----------------------------------------|--------------------------------------------------------------|
| file(s) .parquet / .json(l) / .csv / .arrow | `dataset_path: <builder>`, `data_files: {<split>: [abs]}` |
| dir with dataset_dict.json / state.json | `dataset_path: DIR`, `load_from_disk: True` (save_to_disk)  |
| dir with metadata.jsonl (top or split/) | `dataset_path: imagefolder`, `data_dir: DIR`                |
| any other dir (a hub snapshot)          | `dataset_path: DIR` (the data/*.parquet layout is detected)  |
"""
from __future__ import annotations

import os
from pathlib import Path

from evalsuite.errors import UserError

BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv", ".arrow": "arrow"}
LOCAL_BUILDERS = set(BUILDERS.values()) | {"imagefolder", "text", "pandas"}
# the eval config key that maps a task to its data: `lmms.data.<task>` (in --config FILE or as an override)
DATA_KEY = "lmms.data"

def world_files(name: str, patterns: tuple[str, ...], data_root, split: str) -> list[Path]:
    """The world's question files of local task `name`; UserError naming `--data-root` if any is missing."""
    if data_root is None:
        raise UserError(f"--tasks {name}: no local data; pass --data-root W (a folder written by "
                        f"`evalsuite world build`) or map {DATA_KEY}.{name} in the eval config (--config FILE)")
    files = [Path(data_root) / "questions" / pat.format(split=split) for pat in patterns]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise UserError(f"--tasks {name}: local data not found: {', '.join(missing)} (set --data-root to a "
                        f"folder written by `evalsuite world build`, or map {DATA_KEY}.{name} in the eval config)")
    return files


def data_override(name: str, spec, split: str, dataset_name: str | None = None) -> dict:
    """The dataset keys of an lmms-eval task config that point it at local `spec` (a path or list)."""
    paths = [Path(os.path.expanduser(str(p))) for p in (spec if isinstance(spec, (list, tuple)) else [spec])]
    if not paths:
        raise UserError(f"{DATA_KEY}.{name}: empty list of files")
    for p in paths:
        if not p.exists():
            raise UserError(f"{DATA_KEY}.{name}: {p} does not exist")
    if len(paths) > 1 or paths[0].is_file():
        kinds = {BUILDERS.get(p.suffix.lower()) for p in paths}
        if None in kinds or len(kinds) != 1 or any(p.is_dir() for p in paths):
            raise UserError(f"{DATA_KEY}.{name}: {[str(p) for p in paths]}: expected files of one kind among "
                            f"{sorted(BUILDERS)} (or a single directory)")
        return {"dataset_path": kinds.pop(), "dataset_name": None,
                "dataset_kwargs": {"data_files": {split: [str(p.resolve()) for p in paths]}}}
    root = paths[0].resolve()
    if (root / "dataset_dict.json").is_file() or (root / "state.json").is_file():
        return {"dataset_path": str(root), "dataset_name": None, "dataset_kwargs": {"load_from_disk": True}}
    if (root / "metadata.jsonl").is_file() or any(root.glob("*/metadata.jsonl")):
        return {"dataset_path": "imagefolder", "dataset_name": None, "dataset_kwargs": {"data_dir": str(root)}}
    # a hub snapshot: keep the task's config name (e.g. POPE's "Full"), drop `token: True`
    return {"dataset_path": str(root), "dataset_name": dataset_name, "dataset_kwargs": {}}


def _cache_dirs() -> list[Path]:
    hf_home = Path(os.path.expanduser(os.environ.get("HF_HOME", "~/.cache/huggingface")))
    dirs = [os.environ.get("LMMS_EVAL_DATASETS_CACHE"), os.environ.get("HF_DATASETS_CACHE"),
            hf_home / "datasets", os.environ.get("HF_HUB_CACHE"), hf_home / "hub"]
    return [Path(os.path.expanduser(str(d))) for d in dirs if d]


def hub_cached(dataset_path: str) -> bool:
    """Whether a hub dataset id was loaded or downloaded into a local HF cache before."""
    org, _, name = dataset_path.partition("/")
    wanted = {f"{org}___{name}".lower(), f"datasets--{org}--{name}".lower(), name.lower() if not org else ""}
    wanted.discard("")
    for d in _cache_dirs():
        if d.is_dir() and any(child.name.lower() in wanted for child in d.iterdir()):
            return True
    return False


def check_hub_cached(name: str, leaf: str, cfg: dict) -> None:
    """Fail fast (not after lmms-eval's 5 download retries) when a task's data cannot be had offline."""
    path = cfg.get("dataset_path")
    if not isinstance(path, str):
        return  # python tasks that load their own data
    if path in LOCAL_BUILDERS or Path(os.path.expanduser(path)).exists():
        return
    if not hub_cached(path):
        raise UserError(
            f"--tasks {name}: the data of lmms-eval task {leaf!r} is the hub dataset {path!r}, which is not "
            f"in the local HF cache and cannot be downloaded offline; map {DATA_KEY}.{leaf} to a local file or "
            f"directory (e.g. a `hf download --repo-type dataset {path}` snapshot) in the eval config "
            f"(--config FILE, or the override {DATA_KEY}.{leaf}=PATH)"
        )


def _local_files(task: dict) -> list[tuple[str, Path]]:
    """(name relative to its data root, file) of every local file a dataset override reads, in order."""
    kwargs = task.get("dataset_kwargs") or {}
    roots = [Path(p) for ps in (kwargs.get("data_files") or {}).values() for p in (ps if isinstance(ps, list) else [ps])]
    if isinstance(task.get("dataset_path"), str) and Path(task["dataset_path"]).exists():
        roots.append(Path(task["dataset_path"]))
    if kwargs.get("data_dir"):
        roots.append(Path(kwargs["data_dir"]))
    out = []
    for root in roots:
        if root.is_dir():
            out.extend((str(f.relative_to(root)), f) for f in sorted(root.rglob("*")) if f.is_file())
        elif root.is_file():
            out.append((root.name, root))
    return out


def _digest(payload) -> str:
    from evalsuite.identity import digest

    return digest(payload, 12)


def data_fingerprint(task: dict | str) -> str:
    """Short hash of where a task's docs come from (paths, sizes, mtimes: cheap), so cached answers of
    one world are never served for another world's doc with the same id and prompt."""
    if not isinstance(task, dict):
        return _digest(str(task))
    stats = [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for _, f in _local_files(task)]
    return _digest([task.get("dataset_path"), task.get("dataset_name"), stats])


def content_fingerprint(task: dict | str) -> str:
    """Short hash of a task's data by content (sha256 of every file, names relative to their root): the
    same data gives the same value wherever it lies, so results on it stay comparable (TaskResult.identity).
    A hub dataset (no local files) is identified by its id and config name."""
    from evalsuite.identity import file_sha256

    if not isinstance(task, dict):
        return _digest(["hub", str(task)])
    files = []
    for rel, f in _local_files(task):
        files.append([rel, file_sha256(f)])
    source = task.get("dataset_path") if not files else None  # a local path is not part of the data
    return _digest([source, task.get("dataset_name"), files])
