"""Where an lmms-eval task's documents come from, offline: a dataset override, or a clear error.

Pure path logic (no lmms_eval import). The forms a user can map a task to (`data: {task: PATH}` in
the eval config, or the world of `--data-root`):

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

# lmms task -> question-set files of a world written by `evalsuite world build` (under W/questions/)
WORLD_FILES = {
    "evalsuite_mme": ["mme_{split}.parquet"],
    "evalsuite_pope": ["pope_{split}_random.parquet", "pope_{split}_popular.parquet",
                       "pope_{split}_adversarial.parquet"],
    "evalsuite_pope_random": ["pope_{split}_random.parquet"],
    "evalsuite_pope_popular": ["pope_{split}_popular.parquet"],
    "evalsuite_pope_adversarial": ["pope_{split}_adversarial.parquet"],
}


def world_files(lmms_task: str, data_root, split: str, name: str) -> list[Path]:
    """The world's question files for a local task; UserError naming `--data-root` if any is missing."""
    if data_root is None:
        raise UserError(f"--tasks {name}: no local data; pass --data-root W (a folder written by "
                        f"`evalsuite world build`) or map data.{name} in the eval config")
    files = [Path(data_root) / "questions" / pat.format(split=split) for pat in WORLD_FILES[lmms_task]]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise UserError(f"--tasks {name}: local data not found: {', '.join(missing)} (set --data-root to a "
                        f"folder written by `evalsuite world build`, or map data.{name} in the eval config)")
    return files


def data_override(name: str, spec, split: str, dataset_name: str | None = None) -> dict:
    """The dataset keys of an lmms-eval task config that point it at local `spec` (a path or list)."""
    paths = [Path(os.path.expanduser(str(p))) for p in (spec if isinstance(spec, (list, tuple)) else [spec])]
    if not paths:
        raise UserError(f"data.{name}: empty list of files")
    for p in paths:
        if not p.exists():
            raise UserError(f"data.{name}: {p} does not exist")
    if len(paths) > 1 or paths[0].is_file():
        kinds = {BUILDERS.get(p.suffix.lower()) for p in paths}
        if None in kinds or len(kinds) != 1 or any(p.is_dir() for p in paths):
            raise UserError(f"data.{name}: {[str(p) for p in paths]}: expected files of one kind among "
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
            f"in the local HF cache and cannot be downloaded offline; map data.{leaf} in the eval config "
            f"to a local file or directory (e.g. a `hf download --repo-type dataset {path}` snapshot)"
            + (f" and run --tasks {leaf}" if leaf != name else "")
        )


def data_fingerprint(task: dict | str) -> str:
    """Short hash of where a task's docs come from (paths, sizes, mtimes), so cached answers of one
    world are never served for another world's doc with the same id and prompt."""
    import hashlib
    import json

    if not isinstance(task, dict):
        return hashlib.sha256(str(task).encode()).hexdigest()[:12]
    kwargs = task.get("dataset_kwargs") or {}
    files = kwargs.get("data_files") or {}
    paths = [Path(p) for ps in files.values() for p in (ps if isinstance(ps, list) else [ps])]
    for key in ("dataset_path",):
        if isinstance(task.get(key), str) and Path(task[key]).exists():
            paths.append(Path(task[key]))
    if kwargs.get("data_dir"):
        paths.append(Path(kwargs["data_dir"]))
    stats = []
    for p in paths:
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file():
                st = f.stat()
                stats.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    payload = json.dumps([task.get("dataset_path"), task.get("dataset_name"), stats], default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]
