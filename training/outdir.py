"""A training `--output_dir` belongs to one run, as an evaluation `--output` does (evalsuite/outdir.py).

    with owned_output_dir(cfg):        # flock on OUTPUT_DIR/.lock + OUTPUT_DIR/train_run.json
        trainer.train(...)

- Only one process trains into a folder at a time: a second one is refused with one line (the lock is
  an flock, dropped by the kernel when its holder dies, kill -9 included).
- A folder holding the training artefacts of a run with another configuration (checkpoint-N, metrics,
  adapter, the full weights under save_merged false, the merged checkpoint) is refused unless `--resume_from_checkpoint` is set; the same
  configuration is the same run (started again; a train_run.json written before the prompt settings
  moved into `inputs:` is compared in today's spelling). Files the project did not write are left alone.
- An existing merged checkpoint folder is replaced only when it is one evalsuite wrote (it holds an
  evalsuite.json manifest); a folder of the user's is refused before training starts.

`evalsuite.interrupts.interrupt_exit()` turns SIGINT / SIGTERM into one line and exit 130 / 143 (train.py).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from evalsuite.errors import UserError
from evalsuite.outdir import shown_changes, shown_differences

LOCK = ".lock"
MARKER = "train_run.json"
# settings that may change between a run and its continuation without making it another run
_RESUME_FREE = {"resume_from_checkpoint", "logging_dir", "overwrite_output_dir", "local_rank", "save_on_signal"}
# settings that change when checkpoints are written or where logs go, not the trained weights or the logged
# curve: a resume (and a CSR rerun, training/csr/stages.py) may change them
TRAIN_SCHEDULING = frozenset(_RESUME_FREE | {"save_steps", "save_strategy", "save_total_limit", "dataloader_num_workers",
                                             "dataset_num_proc", "report_to", "project_name", "group_name",
                                             "wandb_mode", "disable_tqdm"})


# LoRA settings that do nothing without LoRA: not part of a run's configuration then (a full fine-tune is the
# same run whatever a preset says of LoRA targets)
_LORA_ONLY = ("lora_scope", "lora_merge")


# a resume may train longer than the first start planned (its steps are the same up to the checkpoint; the
# history in train_run.json keeps both lengths); every other setting of the weights must be the recorded one
RESUME_EXTENDS = ("max_steps", "num_train_epochs")


def _without_idle_lora(plain: dict) -> dict:
    return plain if plain.get("use_lora") else {k: v for k, v in plain.items() if k not in _LORA_ONLY}


def _fingerprint(cfg) -> dict[str, Any]:
    plain = cfg.resolved() if hasattr(cfg, "resolved") else {}
    plain = _without_idle_lora(plain)
    return json.loads(json.dumps({k: v for k, v in plain.items() if k not in _RESUME_FREE and not k.startswith("_")},
                                 default=str, sort_keys=True))


def _unread_differences(old, cfg) -> list[str]:
    """The fields where the recorded run and `cfg` differ, less those cfg's settings never read
    (training/config_checks.py `unread`): e.g. a preset that stopped setting an unread max_target_length is
    the same run. Where the switch itself differs, the switch is named."""
    from evalsuite.outdir import differences

    idle = {f for f, *_ in cfg.unread()} if hasattr(cfg, "unread") else set()
    return [d for d in differences(_upgraded(old), _fingerprint(cfg))
            if d.split(".")[0] not in idle and d.split(".")[0] not in TRAIN_SCHEDULING]


def _upgraded(old: dict) -> dict:
    """A train_run.json config of an earlier release in today's spelling (evalsuite/outdir.py), its missing
    switches filled with what runs did before them (training/config.py `earlier_meaning`)."""
    from evalsuite.outdir import upgraded_config
    from training.config import earlier_meaning

    old = upgraded_config(old)
    if not isinstance(old, dict):
        return old
    return _without_idle_lora({**earlier_meaning(str(old.get("method", ""))), **old})


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0") or 0) == 0


def same_run_config(out: Path, cfg) -> tuple[bool, str]:
    """(whether OUT/train_run.json records cfg's configuration, why not in a few words). A marker written
    before the prompt settings moved into `inputs:` is read in today's spelling (evalsuite/outdir.py)."""
    try:
        old = json.loads((Path(out) / MARKER).read_text(encoding="utf-8"))["config"]
    except FileNotFoundError:
        return False, f"no {MARKER}"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return False, f"{MARKER} unreadable ({e})"
    diff = _unread_differences(old, cfg)
    if diff:
        return False, f"a run of another configuration: {shown_differences(diff)} differ"
    return True, ""


def _record(old: dict | None, mine: dict, cfg) -> dict:
    """train_run.json: `config`, the settings of the run's first start (what its steps were trained under),
    and `history`, one entry per start (its settings, when, what it resumed from): a resume adds an entry,
    it never rewrites what the first half ran under."""
    import datetime as dt

    history = list(old.get("history") or []) if isinstance(old, dict) else []
    if isinstance(old, dict) and isinstance(old.get("config"), dict) and not history:
        history = [{"config": old["config"]}]    # a record written before the history existed
    try:   # the checkpoint this start continues (true resolved to it), None for a fresh start
        from training.config import resume_checkpoint

        resumed = resume_checkpoint(cfg)
    except UserError:
        resumed = str(cfg.resume_from_checkpoint)
    entry = {"config": mine, "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
             "resume_from_checkpoint": resumed}
    first = old["config"] if isinstance(old, dict) and isinstance(old.get("config"), dict) else mine
    return {"config": first, "history": [*history, entry]}


def training_artefacts(out: Path) -> list[str]:
    """Names in `out` that a training run writes (what another run's start would overwrite)."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir()
                  if p.name.startswith("checkpoint-") or p.name in ("metrics.jsonl", "adapter", "merged")
                  # OUTPUT_DIR/model (a full fine-tune under save_merged false) only as the Trainer writes it:
                  # "model" is a common name for a folder a user keeps there
                  or (p.name == "model" and (p / "training_args.bin").is_file()))


def check_merged_dir(path: Path) -> None:
    """Refuse a merged-checkpoint folder that exists and was not written by evalsuite (no manifest)."""
    if path.exists() and not (path / "evalsuite.json").is_file():
        if path.is_dir() and not any(path.iterdir()):
            return
        raise UserError(f"merged_dir {path}: exists and was not written by evalsuite (no evalsuite.json); "
                        "it would be replaced by the merged checkpoint: move it, or pass another --merged_dir")


@contextlib.contextmanager
def owned_output_dir(cfg):
    """Hold OUTPUT_DIR for the duration of a training run (see the module docstring); ranks > 0 only check."""
    import fcntl

    out = Path(cfg.output_dir)
    if cfg.save_merged:
        check_merged_dir(Path(cfg.merged_path))
    if not _is_main_process():
        yield
        return
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"output_dir {out}: another training run is writing there now") from None
    try:
        mine = _fingerprint(cfg)
        marker = out / MARKER
        old = None
        if marker.is_file():
            from evalsuite.safeio import read_json_file

            try:
                old = read_json_file(marker)
            except UserError:
                old = None
        artefacts = training_artefacts(out)
        resuming = bool(cfg.resume_from_checkpoint)
        if artefacts or old is not None:
            if not isinstance(old, dict) or not isinstance(old.get("config"), dict):
                if not resuming:
                    raise UserError(f"output_dir {out}: holds a training run's files ({', '.join(artefacts[:3])}) "
                                    "of unknown configuration; pass another directory, or --resume_from_checkpoint "
                                    "true to continue it")
                old = None   # a folder of an earlier release without a record: resumed as asked
            else:
                diff = _unread_differences(old["config"], cfg)
                if diff and resuming:
                    diff = [d for d in diff if d not in RESUME_EXTENDS]
                if diff and resuming:
                    # the checkpoint's steps were taken under the recorded settings: continuing them under
                    # others would give weights no single configuration describes
                    raise UserError(f"output_dir {out}: resuming a run of other settings ({shown_changes(_upgraded(old['config']), mine, diff)} differ); "
                                    "resume with the recorded settings, or train afresh in another directory")
                if diff:
                    raise UserError(f"output_dir {out}: holds a training run of another configuration "
                                    f"({shown_differences(diff)} differ); pass another directory, or its settings "
                                    "with --resume_from_checkpoint true to continue it")
        from evalsuite.files import write_json_atomic

        write_json_atomic(marker, _record(old, mine, cfg))
        yield
    except BaseException:
        # a run that failed before writing anything (bad data, a bad flag) leaves no folder it made
        if created and {p.name for p in out.iterdir()} <= {LOCK, MARKER}:
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        os.close(fd)


def apply_umask(root: Path) -> None:
    """Give `root` (a folder made by mkdtemp, 0700) and everything in it the modes the process umask
    gives new files, as any other output of the run has."""
    mask = os.umask(0)
    os.umask(mask)
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o777 & ~mask)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o666 & ~mask)
