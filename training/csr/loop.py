"""The CSR iteration driver: for t = 1..T, generate -> score -> pairs -> train + merge -> evaluate.

    python training/train.py --config configs/csr.yaml                 # the preset names `method: csr`
    python training/train.py --config configs/csr_tiny.yaml iterations=1 tree.max_depth=2 --dry-run
    torchrun --nproc_per_node 4 training/train.py --config configs/csr.yaml      # data-parallel sampling

Layout of `output_dir` (default runs/NAME/):
    config.json                      the resolved CSRConfig of the first start
    base_eval.done                   coupled evaluation of the base model (if eval.tasks)
    iter_t/trees.rank{r}.jsonl       rank r's shard of search trees (prompts r, r+W, ...)
    iter_t/trees.jsonl               all trees, prompt order (rank 0 merges the shards)
    iter_t/scores.jsonl              per tree: node id -> {lm, clip, cos}
    iter_t/pairs.json, plain_dpo.json, pair_stats.json
    iter_t/train/                    trainer output (adapter, logs); iter_t/merged/ = checkpoint M_t
    iter_t/manifest.json             iteration, parent, pairs hash, merged path, CSR config
    iter_t/<stage>.done              stage markers, written last (JSON with what the stage produced)

Every file is written atomically and a stage's marker only after its outputs, so a killed run rerun
with the same output_dir resumes at the first unfinished stage (training restarts from its start).
Under torchrun each rank generates a shard of the prompts; rank 0 runs the other single-process
stages while the others wait, and every rank joins training (the trainer is accelerate-aware).
"""
from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from evalsuite.errors import UserError
from evalsuite.files import sha256_file, write_json_atomic
from training.csr.config import CSRConfig, load_config

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- ranks
def _world() -> tuple[int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _barrier() -> None:
    if _world()[1] == 1:
        return
    import datetime as dt

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        # Pin this rank's GPU before NCCL's first collective (else every rank's barrier lands on
        # cuda:0). The long timeout: the other ranks wait here while rank 0 alone scores and evaluates.
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(_local_rank())
        dist.init_process_group("nccl" if cuda else "gloo", timeout=dt.timedelta(hours=12))
    dist.barrier()


def _local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def _device(cfg: CSRConfig) -> str | None:
    """cfg.device, or under torchrun with GPUs this rank's own one (None = the loader's choice)."""
    if cfg.device or _world()[1] == 1:
        return cfg.device
    import torch

    return f"cuda:{_local_rank()}" if torch.cuda.is_available() else None


# ---------------------------------------------------------------- inputs
def load_prompts(path: str | Path, limit: int | None = None) -> list[dict]:
    """Records {id, image, question} from a json list or jsonl; a LLaVA-style `input` with `<image>`
    is accepted as the question (the placeholder is stripped: the chat template adds it once)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: prompt file not found")
    from evalsuite.files import read_json_records

    rows = [r for _, r in read_json_records(path, "prompt")]
    out, seen = [], set()
    for i, row in enumerate(rows[:limit] if limit else rows):
        q = row.get("question", row.get("input")) if isinstance(row, dict) else None
        if not isinstance(q, str) or not row.get("image") or row.get("id") is None:
            raise UserError(f"{path}: record {i} needs 'id', 'image' and a 'question' string")
        rid = str(row["id"])
        if rid in seen:
            raise UserError(f"{path}: record {i}: duplicate id {rid!r}")
        seen.add(rid)
        out.append({"id": rid, "image": row["image"], "question": q.replace("<image>", "").strip()})
    if not out:
        raise UserError(f"{path}: no prompt records")
    return out


def _done(d: Path, stage: str) -> dict | None:
    p = d / f"{stage}.done"
    return json.loads(p.read_text()) if p.exists() else None


def _mark(d: Path, stage: str, **info: Any) -> None:
    write_json_atomic(d / f"{stage}.done", info)


class _Models:
    """The generator VLM and the CLIP judge, loaded on first use and released before training."""

    def __init__(self, cfg: CSRConfig):
        self.cfg, self._vlm, self._vlm_path, self._scorer = cfg, None, None, None

    def vlm(self, path: str):
        if self._vlm is None or self._vlm_path != str(path):
            from evalsuite.models.vlm import load_vlm

            self.release()
            self._vlm = load_vlm(path, device=_device(self.cfg), dtype=self.cfg.dtype,
                                 inputs=self.cfg.generation_input_config())
            self._vlm_path = str(path)
        return self._vlm

    def scorer(self):
        if self._scorer is None:
            from evalsuite.metrics.relevance import RelevanceScorer

            self._scorer = RelevanceScorer(self.cfg.clip, device=_device(self.cfg), batch_size=self.cfg.reward.clip_batch)
        return self._scorer

    def release(self) -> None:
        self._vlm = self._vlm_path = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass


# ---------------------------------------------------------------- stages
def stage_generate(cfg: CSRConfig, models: _Models, ckpt: str, records: list[dict], d: Path) -> None:
    from training.csr.generate import TreeGenerator, read_trees, write_trees

    rank, world = _world()
    shard = d / f"trees.rank{rank}.jsonl"
    info = _done(d, f"generate.rank{rank}")
    if not info or info.get("world") != world:  # a shard of a run with another world size is another shard
        mine = records[rank::world]
        trees = TreeGenerator(models.vlm(ckpt), cfg.tree, cfg.image_root).generate(mine)
        write_trees(shard, trees)
        _mark(d, f"generate.rank{rank}", trees=len(trees), world=world)
    _barrier()
    if rank == 0:
        by_id = {t.id: t for r in range(world) for t in read_trees(d / f"trees.rank{r}.jsonl")}
        write_trees(d / "trees.jsonl", [by_id[r["id"]] for r in records])
        _mark(d, "generate", trees=len(records), ranks=world)
    _barrier()


def stage_score(cfg: CSRConfig, models: _Models, ckpt: str, d: Path) -> None:
    from evalsuite.files import write_jsonl_atomic
    from training.csr.generate import read_trees
    from training.csr.reward import score_trees

    trees = read_trees(d / "trees.jsonl")
    scores = score_trees(models.vlm(ckpt), models.scorer(), trees, cfg.image_root, cfg.reward)
    write_jsonl_atomic(d / "scores.jsonl", scores)
    _mark(d, "score", trees=len(trees))


def stage_pairs(cfg: CSRConfig, models: _Models, ckpt: str, t: int, d: Path) -> None:
    from training.csr.generate import read_trees
    from training.csr.pairs import add_relevance, build_pairs, pair_stats, write_pair_files

    trees = read_trees(d / "trees.jsonl")
    with open(d / "scores.jsonl") as fh:
        scores = [json.loads(x) for x in fh if x.strip()]
    from training.csr.pairs import released_human_turn

    vlm = models.vlm(ckpt)
    prompts = [released_human_turn(vlm, t.question) for t in trees] if cfg.pairs.template == "released" else None
    pairs, skipped = build_pairs(trees, scores, vlm.tokenizer, cfg.reward, cfg.pairs, prompts)
    if not pairs:  # said here, in words, not as the store's "computed from 0 samples"
        from evalsuite.errors import RunFailure
        from training.csr.pairs import no_pairs_message

        raise RunFailure(no_pairs_message(t, trees, scores, skipped, cfg.reward, cfg.pairs.guards))
    add_relevance(pairs, models.scorer(), cfg.image_root)
    pairs_path = write_pair_files(d, pairs)
    result = pair_stats(pairs, skipped, cfg.reward, config={"iteration": t, "generator": str(ckpt)})
    write_json_atomic(d / "pair_stats.json", {**result.to_dict(), "skipped": dict(skipped)})
    _write_stats(cfg, ckpt, t, result)
    log.info("iter %d: %d pairs, %d skipped %s", t, len(pairs), sum(skipped.values()), dict(skipped))
    _mark(d, "pairs", pairs=len(pairs), skipped=dict(skipped), pairs_hash=sha256_file(pairs_path))


def _write_stats(cfg: CSRConfig, ckpt: str, t: int, result) -> None:
    """One store run per iteration, with a run id derived from the run dir so a resumed run that
    already wrote it does not write it twice.

    The rows sit under the checkpoint that generated the pairs, M_{t-1} = `ckpt`: its path, hash,
    iteration and label (the one its evaluation in this loop gets), and `generator` names it too;
    docs/ARCHITECTURE.md (results store) says why. Their eval setup is what makes the statistics of
    two iterations comparable: the prompts, the reward and pair settings and the judge."""
    import datetime as dt

    from evalsuite.manifest import checkpoint_hash, read_manifest, resolve_parent
    from evalsuite.store import Store
    from evalsuite.version import code_version
    from training.csr.train_log import store_run_id

    run_id = store_run_id(cfg, t, "pairs")
    store = Store(cfg.store)
    if (Path(cfg.store) / "metrics" / f"{run_id}.parquet").exists():
        return
    manifest = read_manifest(ckpt) or {}
    gen_hash = checkpoint_hash(ckpt)
    iteration = manifest.get("iteration")
    full = cfg.to_dict()
    prompts = Path(cfg.prompts)
    result.identity = {"prompts": sha256_file(prompts) if prompts.is_file() else str(prompts),
                       "image_root": str(cfg.image_root), "limit": cfg.limit, "tree": full["tree"],
                       "reward": full["reward"], "pairs": full["pairs"], "judge": checkpoint_hash(cfg.clip)}
    meta = {"run_id": run_id, "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "ckpt": str(Path(ckpt).resolve()), "ckpt_hash": gen_hash, "generator": gen_hash,
            "iteration": iteration if isinstance(iteration, int) else t - 1, "method": manifest.get("method"),
            "parent": resolve_parent(manifest.get("parent")),
            "label": f"{cfg.name}/base" if t == 1 else f"{cfg.name}/iter_{t - 1}", "config": full,
            "code_version": code_version(), "data_root": str(Path(cfg.image_root).resolve())}
    store.write_run(meta, [result])


def stage_train(cfg: CSRConfig, models: _Models, ckpt: str, t: int, d: Path) -> str:
    from training.trainers.dpo import run_dpo

    info = _done(d, "pairs")
    if not info["pairs"]:
        raise UserError(f"{d}: iteration {t} produced no preference pairs (skipped: {info['skipped']}); "
                        "loosen tree caps or pairs.min_gap")
    models.release()
    rank, _ = _world()
    if rank == 0:  # a killed attempt leaves partial trainer output: start training afresh
        for sub in ("train", "merged"):
            shutil.rmtree(d / sub, ignore_errors=True)
    _barrier()
    tcfg = cfg.train_config(ckpt, t, d)
    tcfg.check_paths()
    merged = str(run_dpo(tcfg))
    if rank == 0:
        write_json_atomic(d / "manifest.json", {
            "iteration": t, "parent": str(ckpt), "merged": merged, "pairs_hash": info["pairs_hash"],
            "num_pairs": info["pairs"], "config": cfg.to_dict(), "inputs": cfg.input_config().to_dict(),
            "generation_inputs": cfg.generation_input_config().to_dict(),
            "train_config": tcfg.resolved()})
        _mark(d, "train", merged=merged)
    _barrier()
    return merged


def stage_eval(cfg: CSRConfig, ckpt: str, label: str, out: Path) -> None:
    """The coupled evaluation, on rank 0 alone (the other ranks wait at the next barrier). A rerun after a
    kill resumes it: `out` holds the same run, finished tasks are in the store, finished answers cached."""
    from evalsuite.dist import Dist
    from evalsuite.run import run_eval

    run_eval(cfg.eval_config(ckpt, label, out), dist=Dist())


# ---------------------------------------------------------------- driver
def run_iteration(cfg: CSRConfig, models: _Models, records: list[dict], ckpt: str, t: int) -> str:
    d = cfg.run_dir / f"iter_{t}"
    d.mkdir(parents=True, exist_ok=True)
    rank, _ = _world()
    if not _done(d, "generate"):
        stage_generate(cfg, models, ckpt, records, d)
    for stage, fn in (("score", lambda: stage_score(cfg, models, ckpt, d)),
                      ("pairs", lambda: stage_pairs(cfg, models, ckpt, t, d))):
        if rank == 0 and not _done(d, stage):
            fn()
        _barrier()  # unconditional: a rank that saw the marker late must not skip a barrier rank 0 waits in
    done = _done(d, "train")
    merged = done["merged"] if done else stage_train(cfg, models, ckpt, t, d)
    if rank == 0:   # the training curves, for the report (also on a resumed run that predates them)
        from training.csr.train_log import write_train_log

        write_train_log(cfg, ckpt, merged, t, d)
    if cfg.evaluates and not _done(d, "eval") and rank == 0:
        stage_eval(cfg, merged, f"{cfg.name}/iter_{t}", d / "eval")
        _mark(d, "eval", tasks=list(cfg.eval.tasks))
    _barrier()
    return merged


def run_csr(cfg: CSRConfig | dict | str | Path) -> list[str]:
    """Run (or resume) the loop; returns the merged checkpoint dirs [M_1, ..., M_T]."""
    if isinstance(cfg, (str, Path)):
        cfg = load_config(cfg)
    elif isinstance(cfg, dict):
        cfg = CSRConfig.from_dict(cfg)
    run_dir = cfg.run_dir
    rank, _ = _world()
    records = load_prompts(cfg.prompts, cfg.limit)
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not (run_dir / "config.json").exists():
            write_json_atomic(run_dir / "config.json", cfg.to_dict())
        if cfg.evaluates and not (run_dir / "base_eval.done").exists():
            stage_eval(cfg, cfg.model, f"{cfg.name}/base", run_dir / "base_eval")
            _mark(run_dir, "base_eval", tasks=list(cfg.eval.tasks))
    _barrier()
    models = _Models(cfg)
    ckpt, merged = cfg.model, []
    for t in range(1, cfg.iterations + 1):
        ckpt = run_iteration(cfg, models, records, ckpt, t)
        merged.append(ckpt)
        log.info("iteration %d done: %s", t, ckpt)
    models.release()
    return merged


def main(argv: list[str] | None = None) -> int:
    """`python -m training.csr.loop --config X.yaml [overrides]` = `python training/train.py --method csr ...`."""
    from training.train import main as train_main

    return train_main(["--method", "csr", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
