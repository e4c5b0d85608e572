"""The DPO training log of one CSR iteration as a results-store run, so the report can draw the curves.

Each iteration's trainer writes OUTPUT_DIR/iter_t/train/metrics.jsonl (`JsonLogCallback`): one row per
logging step with loss, rewards/{chosen,rejected,margins,accuracies} and logps/{chosen,rejected}. The
loop stores those rows as the per-sample records of a `csr_train` run (one record per logged step, key =
step) on the checkpoint the training produced, M_t, with three summary metrics (the mean over the last
tenth of the logged steps): final_loss, final_reward_margin and final_reward_accuracy. The store makes
the curves self-describing: `evalsuite report` finds them with the checkpoint they belong to, no
run directory needed.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

log = logging.getLogger(__name__)

TASK = "csr_train"
VERSION = "1"
FINAL = (("final_loss", "loss", False), ("final_reward_margin", "rewards/margins", True),
         ("final_reward_accuracy", "rewards/accuracies", True))


def store_run_id(cfg, t: int, kind: str) -> str:
    """The store run id of iteration t's `kind` run ("pairs", "train"): derived from the run dir, so a
    resumed loop that already wrote it finds it and does not write it twice."""
    from training.csr.stages import restart_count

    tag = hashlib.sha256(str(cfg.run_dir.resolve()).encode()).hexdigest()[:8]
    n = restart_count(cfg, t)   # an iteration recomputed by --restart-from is another run
    return f"csr-{re.sub(r'[^A-Za-z0-9._-]', '-', cfg.name)[:60]}-{tag}-iter{t}-{kind}" + (f"-r{n}" if n else "")


def step_rows(path: Path) -> list[dict]:
    """The training-step rows of a trainer log (rows with a loss; the final summary row has none)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                if isinstance(row, dict) and isinstance(row.get("loss"), (int, float)):
                    rows.append(row)
    return rows


def train_result(rows: list[dict], t: int, train_cfg: dict):
    """The `csr_train` TaskResult of one iteration's step rows (module doc)."""
    from evalsuite.types import MetricValue, TaskResult
    from training.config import EARLIER_MEANING, without_earlier_meaning
    from training.outdir import TRAIN_SCHEDULING

    tail = rows[-max(1, len(rows) // 10):]
    metrics = []
    for name, field, hib in FINAL:
        vals = [float(r[field]) for r in tail if isinstance(r.get(field), (int, float))]
        if vals:
            metrics.append(MetricValue(name, sum(vals) / len(vals), hib, n=len(vals)))
    samples = [{"key": f"{int(r.get('step', i)):06d}", "step": r.get("step", i), "epoch": r.get("epoch"),
                **{k: r[k] for k in r if k not in ("step", "epoch")}} for i, r in enumerate(rows)]
    return TaskResult(task=TASK, version=VERSION, metrics=metrics, samples=samples,
                      config={"iteration": t, "final": "mean over the last tenth of the logged steps"},
                      # settings of when checkpoints and logs are written give the same training: not part of it
                      identity={"train": without_earlier_meaning(
                          {k: v for k, v in train_cfg.items() if k not in TRAIN_SCHEDULING}, EARLIER_MEANING)})


def train_settings(cfg, parent: str, t: int, d: Path) -> dict:
    """The preset's `train:` mapping with the LoRA rule the run used, defaults included: a preset naming no
    lora_scope trains under another rule than before the switch existed, so its results must not share the
    earlier key (train_result leaves the rule out only where it is the earlier one)."""
    train = dict(cfg.to_dict().get("train") or {})
    if train.get("use_lora"):
        used = cfg.train_config(parent, t, d, portable=True)
        train.update(lora_scope=used.lora_scope, lora_merge=used.lora_merge)
    return train


def write_train_log(cfg, parent: str, merged: str, t: int, d: Path) -> None:
    """Store iteration t's training log (once); a missing or empty log is a warning, not a failure."""
    from evalsuite.manifest import checkpoint_hash, read_manifest, resolve_parent
    from evalsuite.store import Store
    from evalsuite.version import code_version

    run_id = store_run_id(cfg, t, "train")
    if (Path(cfg.store) / "metrics" / f"{run_id}.parquet").exists():
        return
    path = d / "train" / "metrics.jsonl"
    rows = step_rows(path) if path.is_file() else []
    if not rows:
        log.warning("iter %d: no training steps in %s; the report will have no curves for it", t, path)
        return
    manifest = read_manifest(merged) or {}
    full = cfg.to_dict()
    meta = {"run_id": run_id, "ckpt": str(Path(merged).resolve()), "ckpt_hash": checkpoint_hash(merged),
            "iteration": t, "method": manifest.get("method") or "csr",
            "parent": resolve_parent(manifest.get("parent")) or str(Path(parent).resolve()),
            "label": f"{cfg.name}/iter_{t}", "config": full, "code_version": code_version()}
    Store(cfg.store).write_run(meta, [train_result(rows, t, train_settings(cfg, parent, t, d))])
