"""What each CSR stage ran under, and the rerun rule: a rerun never mixes two configurations.

    OUTPUT_DIR/stages.json   {"base_eval": SETTINGS, "iter_t": {stage: SETTINGS}, "restarts": {"iter_t": n}}

Before a stage starts, rank 0 records the settings it reads (`stage_settings`: the fields of the run config
that change its outputs; `identity=False` fields, which give the same results, left out). A rerun compares
them with its own settings before any model loads (`check_rerun`):
- the same: finished stages are reused, a partial one continues;
- a stage that started (finished or not) under other settings: one line naming the stage and the fields,
  with the ways out: the old settings, another output_dir, or `--restart-from iter_T/STAGE` (or
  `base_eval`), which discards that stage and everything that depends on it and recomputes them.

Dependencies: generate -> score -> pairs -> train -> the next iteration's generate form one chain; an
evaluation (base_eval, iter_t/eval) depends on its checkpoint only. Restarting from a chain stage of
iteration t discards that stage, the later stages of t (its evaluation included) and every later
iteration; restarting from an evaluation discards the evaluations from there on. The pair statistics and
training curves of a restarted iteration are stored under a new run id (`restart_count`), the old rows
stay (they describe what ran then).

A run folder of an earlier release (markers, no stages.json) is read through its config.json (the
settings of its first start).
"""
from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

from evalsuite.errors import UserError
from evalsuite.files import write_json_atomic
from evalsuite.outdir import EVAL_SPEED_KEYS, shown_changes
from training.outdir import TRAIN_SCHEDULING

log = logging.getLogger(__name__)

FILE = "stages.json"
CHAIN = ("generate", "score", "pairs", "train")
STAGES = (*CHAIN, "eval")
BASE = "base_eval"
# what each stage leaves in iter_t/ (a partial stage included)
OUTPUTS = {
    "generate": ("trees.rank*.jsonl", "generate.rank*.done", "trees.jsonl", "generate.done", "vllm_worker.log"),
    "score": ("scores.jsonl", "score.done"),
    "pairs": ("pairs.json", "pair_stats.json", "pairs.done"),
    "train": ("train", "merged", "manifest.json", "train.done"),
    "eval": ("eval", "eval.done"),
}


def tree_identity(tree) -> dict[str, Any]:
    """The search settings that shape the trees (evalsuite/identity.py options_identity: identity=False
    fields left out); `pool` and `reference` grow the same trees, a vLLM worker samples its own, so
    `engine` is part of it only as `vllm`. Switches at their earlier meaning are left out (EARLIER_TREE)."""
    from evalsuite.identity import options_identity
    from training.config import without_earlier_meaning
    from training.csr.config import EARLIER_TREE

    ident = without_earlier_meaning(options_identity(tree), EARLIER_TREE)
    if tree.engine == "vllm":
        ident["engine"] = "vllm"
    return ident


def _plain(obj) -> Any:
    from evalsuite.config import to_plain

    return json.loads(json.dumps(to_plain(obj), default=str, sort_keys=True))


def _drop(plain: dict, keys) -> dict:
    """`plain` less the dotted `keys`."""
    out = json.loads(json.dumps(plain))
    for key in keys:
        *head, last = key.split(".")
        d = out
        for h in head:
            d = d.get(h) if isinstance(d, dict) else None
        if isinstance(d, dict):
            d.pop(last, None)
    return out


def prompts_id(cfg) -> str:
    """The prompts file by content (hashed once per process while it is unchanged), else its name."""
    from evalsuite.identity import file_sha256

    p = Path(cfg.prompts)
    return file_sha256(p) if p.is_file() else str(p)


def stage_settings(cfg, stage: str) -> dict[str, Any]:
    """The settings `stage` reads that change its outputs, keyed as the run config spells them."""
    from evalsuite.identity import options_identity

    if stage == "generate":
        return _plain({"model": str(cfg.model), "prompts": prompts_id(cfg), "limit": cfg.limit,
                       "image_root": str(cfg.image_root), "dtype": cfg.dtype,
                       "inputs": cfg.generation_input_config(), "tree": tree_identity(cfg.tree)})
    if stage == "score":
        r = cfg.reward
        return _plain({"clip": str(cfg.clip), "reward": {"language_score": r.language_score, "clip_text": r.clip_text}})
    if stage == "pairs":
        from training.config import without_earlier_meaning
        from training.csr.config import EARLIER_PAIRS

        return _plain({"reward": options_identity(cfg.reward),
                       "pairs": without_earlier_meaning(options_identity(cfg.pairs), EARLIER_PAIRS)})
    if stage == "train":
        return _plain({"train": {k: v for k, v in cfg.train.items() if k not in TRAIN_SCHEDULING},
                       "inputs": cfg.input_config()})
    if stage in ("eval", BASE):
        plain = _plain(cfg.eval) if cfg.eval is not None else None
        return {"eval": _drop(plain, EVAL_SPEED_KEYS) if plain else None, "inputs": _plain(cfg.input_config())}
    raise ValueError(stage)


# ---------------------------------------------------------------- the record
def read(run_dir: Path) -> dict:
    try:
        data = json.loads((Path(run_dir) / FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise UserError(f"{Path(run_dir) / FILE}: unreadable ({e}); pass another output_dir") from None
    if not isinstance(data, dict):
        raise UserError(f"{Path(run_dir) / FILE}: not a JSON object; pass another output_dir")
    return data


def record(cfg, where: str, stage: str | None = None) -> None:
    """Before `stage` of `where` ("iter_t", or "base_eval" with stage None) starts: its settings, unless
    already recorded (a rerun with the same settings leaves the entry as the first start wrote it)."""
    data = read(cfg.run_dir)
    if stage is None:
        if where in data:
            return
        data[where] = stage_settings(cfg, BASE)
    else:
        entry = data.setdefault(where, {})
        if stage in entry:
            return
        entry[stage] = stage_settings(cfg, stage)
    write_json_atomic(Path(cfg.run_dir) / FILE, data)


def restart_count(cfg, t: int) -> int:
    """How many times iteration t was discarded by --restart-from (0: never)."""
    try:
        n = read(cfg.run_dir).get("restarts", {}).get(f"iter_{t}", 0)
    except UserError:
        return 0
    return n if isinstance(n, int) else 0


def _has_outputs(d: Path, stage: str) -> bool:
    return any(any(d.glob(pattern)) for pattern in OUTPUTS[stage])


def _legacy(cfg, run_dir: Path) -> dict:
    """The record of a run folder written before stages.json: its markers' stages under config.json's settings."""
    from training.csr.config import CSRConfig

    try:
        first = CSRConfig.from_dict(json.loads((run_dir / "config.json").read_text(encoding="utf-8")),
                                    str(run_dir / "config.json"), report=False)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, UserError) as e:
        log.warning("%s: config.json unreadable (%s): its finished stages are not checked against this run's "
                    "settings", run_dir, e)
        return {}
    data: dict = {}
    if (run_dir / f"{BASE}.done").exists() or (run_dir / BASE).is_dir():
        data[BASE] = stage_settings(first, BASE)
    for d in _iter_dirs(run_dir):
        entry = {s: stage_settings(first, s) for s in STAGES if _has_outputs(d, s)}
        if entry:
            data[d.name] = entry
    return data


def _iter_dirs(run_dir: Path) -> list[Path]:
    found = [p for p in run_dir.glob("iter_*") if p.is_dir() and p.name[5:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def _order(data: dict) -> list[tuple[str, str | None]]:
    """(where, stage) of every recorded stage, base_eval first, then iteration by iteration in stage order."""
    out: list[tuple[str, str | None]] = [(BASE, None)] if BASE in data else []
    iters = sorted((k for k in data if re.fullmatch(r"iter_\d+", k)), key=lambda k: int(k[5:]))
    for it in iters:
        out += [(it, s) for s in STAGES if isinstance(data[it], dict) and s in data[it]]
    return out


def _name(where: str, stage: str | None) -> str:
    return where if stage is None else f"{where}/{stage}"


def check_rerun(cfg, restart_from: str | None = None, discard: bool = True) -> None:
    """Refuse (one line) a rerun whose settings differ from a stage that ran, or, with `restart_from`,
    discard what the change invalidates (module doc; `discard` false: only check, as the ranks other than
    0 do). Call it before any model loads."""
    run_dir = Path(cfg.run_dir)
    target = _parse_restart(restart_from) if restart_from else None
    if not run_dir.is_dir():
        if target:
            raise UserError(f"--restart-from {restart_from}: {run_dir} holds no run to restart")
        return
    data = read(run_dir)
    legacy = not data
    if legacy:
        data = _legacy(cfg, run_dir)
    changed = None
    for where, stage in _order(data):
        old = data[where] if stage is None else data[where][stage]
        new = stage_settings(cfg, BASE if stage is None else stage)
        if old != new:
            changed = (where, stage, shown_changes(old, new))
            break
    if target is None:
        if changed:
            where, stage, shown = changed
            name = _name(where, stage)
            raise UserError(f"{run_dir}: {name} ran with other settings ({shown}); rerun with its settings to "
                            f"continue, pass another output_dir, or add --restart-from {name} to discard it and "
                            "what depends on it and recompute")
        if legacy and data and discard:
            write_json_atomic(run_dir / FILE, data)
        return
    if changed and not _covers(target, (changed[0], changed[1])):
        raise UserError(f"--restart-from {restart_from}: {_name(changed[0], changed[1])} ran with other settings "
                        f"({changed[2]}) and comes first: restart from it or earlier")
    if discard:
        _discard(cfg, run_dir, data, target)


def _parse_restart(value: str) -> tuple[str, str | None]:
    value = str(value).strip().strip("/")
    if value == BASE:
        return BASE, None
    m = re.fullmatch(r"(iter_\d+)/(\w+)", value)
    if not m or m.group(2) not in STAGES or int(m.group(1)[5:]) < 1:
        raise UserError(f"--restart-from {value!r}: expected {BASE} or iter_T/STAGE with STAGE one of "
                        f"{', '.join(STAGES)} (e.g. iter_1/generate)")
    return m.group(1), m.group(2)


def _covers(target: tuple[str, str | None], changed: tuple[str, str | None]) -> bool:
    """Whether restarting from `target` discards the stage `changed`."""
    tw, ts = target
    cw, cs = changed
    if cs is None or cs == "eval":   # an evaluation: discarded by a restart from an evaluation at or before it,
        if cs is None:               # or from a chain stage of an iteration at or before it
            return tw == BASE
        return tw != BASE and (int(tw[5:]) < int(cw[5:]) or (tw == cw))
    if ts is None or ts == "eval":
        return False
    ti, ci = int(tw[5:]), int(cw[5:])
    return ti < ci or (ti == ci and CHAIN.index(ts) <= CHAIN.index(cs))


def _remove(d: Path, stage: str) -> None:
    for pattern in OUTPUTS[stage]:
        for p in d.glob(pattern):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)


def _discard(cfg, run_dir: Path, data: dict, target: tuple[str, str | None]) -> None:
    """Remove the outputs and records of `target` and of what depends on it; one log line says what."""
    tw, ts = target
    gone: list[str] = []
    if tw == BASE:
        shutil.rmtree(run_dir / BASE, ignore_errors=True)
        (run_dir / f"{BASE}.done").unlink(missing_ok=True)
        data.pop(BASE, None)
        gone.append(BASE)
        t0, stages0 = 1, ("eval",)
    else:
        t0 = int(tw[5:])
        stages0 = ("eval",) if ts == "eval" else STAGES[STAGES.index(ts):]
    restarts = data.setdefault("restarts", {})
    for d in _iter_dirs(run_dir):
        t = int(d.name[5:])
        if t < t0:
            continue
        # a chain restart invalidates every stage of later iterations; an evaluation restart, their evaluations
        stages = stages0 if (t == t0 or stages0 == ("eval",)) else STAGES
        for s in stages:
            if _has_outputs(d, s) or s in data.get(d.name, {}):
                _remove(d, s)
                data.get(d.name, {}).pop(s, None)
                gone.append(f"{d.name}/{s}")
        if any(s in stages for s in ("pairs", "train")):
            restarts[d.name] = int(restarts.get(d.name, 0)) + 1
    write_json_atomic(run_dir / FILE, data)
    write_json_atomic(run_dir / "config.json", cfg.to_dict())
    log.warning("%s: --restart-from %s: discarded %s; recomputed with this run's settings", run_dir,
                _name(tw, ts), ", ".join(gone) or "nothing (no stage had run)")
