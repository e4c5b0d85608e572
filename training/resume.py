"""Which checkpoint-N folder of a training output_dir a run can continue from: one rule for
`--resume_from_checkpoint` (training/config.py `resume_checkpoint`), the CSR loop's continuation
(training/signals.py `resumable_checkpoint`) and the save-on-signal line.

A checkpoint is complete when it holds trainer_state.json (the Trainer writes it last), the model
weights, and the optimizer + LR scheduler state. transformers resumes a folder without the optimizer or
scheduler file (what `save_only_model` writes) with a fresh optimizer and a restarted LR schedule and
says nothing, so such a folder is not resumable here. A folder without trainer_state.json or weights is
a save cut short (a kill during the save): the latest complete one before it is used instead. So is a
folder one of whose files does not load (`damaged_file`: a safetensors header or a torch zip archive cut
short, a JSON file that does not parse), with one warning naming the file; when no folder loads, the
refusal names the file and the choices.
"""
from __future__ import annotations

import json
import logging
import struct
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

WEIGHTS_ONLY = "weights only (save_only_model): not resumable"
_told: set[str] = set()  # skipped folders already logged (the config asks at load, at check and at train())


def step_of(path: Path) -> int | None:
    """N of a checkpoint-N folder name, else None."""
    head, _, tail = path.name.partition("-")
    return int(tail) if head == "checkpoint" and tail.isdigit() else None


def _names(path: Path) -> tuple[set[str], set[str]]:
    files, dirs = set(), set()
    for p in path.iterdir():
        (dirs if p.is_dir() else files).add(p.name)
    return files, dirs


def checkpoint_problem(path: str | Path) -> str | None:
    """Why the checkpoint folder `path` cannot be resumed (a few words), None when it can."""
    path = Path(path)
    try:
        files, dirs = _names(path)
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    # DeepSpeed keeps model, optimizer and scheduler state in its global_stepN folder (transformers'
    # _load_optimizer_and_scheduler leaves them to deepspeed_init); FSDP its sharded *_fsdp* / optimizer_* folders
    deepspeed = any(d.startswith("global_step") for d in dirs)
    if "trainer_state.json" not in files:
        return "half-written (no trainer_state.json)"
    weights = deepspeed or any(f.endswith((".safetensors", ".safetensors.index.json")) for f in files) or any("fsdp" in d for d in dirs)
    if not weights:
        return "half-written (no model weights)"
    # the files transformers' _load_optimizer_and_scheduler looks for
    optimizer = deepspeed or bool({"optimizer.pt", "optimizer.bin"} & files) or any("optimizer" in d for d in dirs)
    scheduler = deepspeed or "scheduler.pt" in files
    if not (optimizer and scheduler):
        return WEIGHTS_ONLY
    bad = damaged_file(path)
    return f"damaged: {bad}" if bad else None


def _safetensors_problem(p: Path) -> str | None:
    """Why a safetensors file would not load, from its header alone (length, JSON, tensor extents)."""
    size = p.stat().st_size
    with open(p, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than a safetensors header"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"header length {n} beyond the file's {size} bytes (cut short?)"
        try:
            header = json.loads(fh.read(n))
        except ValueError:
            return "header is not JSON"
    ends = [v["data_offsets"][1] for k, v in header.items()
            if k != "__metadata__" and isinstance(v, dict) and isinstance(v.get("data_offsets"), list)
            and len(v["data_offsets"]) == 2]
    if ends and 8 + n + max(ends) > size:
        return f"tensor data ends at byte {8 + n + max(ends)} of a {size}-byte file (cut short?)"
    return None


def _torch_file_problem(p: Path) -> str | None:
    """Why a torch.save file would not load: a zip archive (torch's format) whose directory does not read.
    A file of torch's legacy (pickle) format is not checked."""
    with open(p, "rb") as fh:
        magic = fh.read(2)
    if magic != b"PK":
        return "empty" if not magic else None
    try:
        with zipfile.ZipFile(p) as z:
            z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        return f"not a readable archive ({e})"
    return None


def damaged_file(path: str | Path) -> str | None:
    """'NAME (why)' of the first file of checkpoint folder `path` that would not load, None when all read:
    safetensors headers, torch archives (optimizer, scheduler, RNG state) and JSON files, checked without
    reading the tensors. The answer is kept per folder while no file's size or mtime changes: a resume asks
    for the same folder at config load, at the check and in train()."""
    files = sorted(p for p in Path(path).iterdir() if p.is_file())
    try:
        signature = (str(Path(path).resolve()), tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    except OSError:
        signature = None
    if signature is not None and signature in _checked:
        return _checked[signature]
    why = _first_damaged(files)
    if signature is not None:
        _checked[signature] = why
    return why


_checked: dict[tuple, str | None] = {}


def _first_damaged(files: list[Path]) -> str | None:
    for p in files:
        if not p.is_file():
            continue
        try:
            if p.name.endswith(".safetensors"):
                why = _safetensors_problem(p)
            elif p.suffix in (".pt", ".pth", ".bin"):
                why = _torch_file_problem(p)
            elif p.suffix == ".json":
                try:
                    json.loads(p.read_bytes())
                    why = None
                except ValueError:
                    why = "not JSON (cut short?)"
            else:
                why = None
        except OSError as e:
            why = f"unreadable ({e.strerror or e})"
        if why:
            return f"{p.name} ({why})"
    return None


def latest_checkpoint(out: str | Path) -> tuple[Path | None, str]:
    """(the checkpoint to continue from, why there is none) for output_dir `out`: the highest complete
    checkpoint-N. Half-written folders above it are skipped with one log line each; a weights-only highest
    folder gives None (continuing from an older one would silently drop its steps)."""
    out = Path(out)
    found = sorted((p for p in out.glob("checkpoint-*") if p.is_dir() and step_of(p) is not None),
                   key=step_of, reverse=True) if out.is_dir() else []
    if not found:
        return None, f"{out} holds no checkpoint-N directory"
    problems: list[str] = []   # of the folders checked so far (the last: every folder's)
    for p in found:
        why = checkpoint_problem(p)
        if why is None:
            return p, ""
        if why == WEIGHTS_ONLY:
            return None, f"{p}: {why} (no optimizer/scheduler state)"
        problems.append(why)
        if p is found[-1]:
            if any(w.startswith("damaged") for w in problems):
                shown = f"{p}/{why.removeprefix('damaged: ')} is damaged" if why.startswith("damaged") else f"{p}: {why}"
                return None, (f"{shown}; no checkpoint-N in {out} loads: remove the damaged ones and resume "
                              "from an earlier save, or train afresh in another output_dir")
            return None, f"{p}: {why}; no complete checkpoint-N in {out}"
        if f"{p}: {why}" not in _told:
            _told.add(f"{p}: {why}")
            if why.startswith("damaged"):
                log.warning("%s/%s: skipped, continuing from the latest checkpoint whose files all load",
                            p, why.removeprefix("damaged: "))
            else:
                log.warning("%s: %s; skipped", p, why)
    return None, ""  # not reached
