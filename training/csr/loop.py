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
    iter_t/pairs.json, pair_stats.json
    iter_t/train/                    trainer output (adapter, logs); iter_t/merged/ = checkpoint M_t
    iter_t/manifest.json             iteration, parent, pairs hash, merged path, CSR config
    iter_t/<stage>.done              stage markers, written last (JSON with what the stage produced)

Every file is written atomically and a stage's marker only after its outputs, so a killed run rerun
with the same output_dir resumes at the first unfinished stage. Training continues from the latest
complete checkpoint-N in iter_t/train/ (one a SIGTERM/SIGINT saved, training/signals.py, or a periodic
`train.save_steps` one) when that folder holds the same training configuration; otherwise (another
configuration, no complete checkpoint, weights only) one log line says why and training starts afresh.
Under torchrun each rank generates a shard of the prompts; rank 0 runs the other single-process
stages while the others wait, and every rank joins training (the trainer is accelerate-aware).
"""
from __future__ import annotations

import datetime
import gc
import json
import logging
import shutil
import sys
from pathlib import Path
from typing import Any

from evalsuite.dist import Dist
from evalsuite.errors import UserError
from evalsuite.files import sha256_file, write_json_atomic
from training.csr import stages
from training.csr.config import CSRConfig, load_config

log = logging.getLogger(__name__)


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
        if not isinstance(q, str) or row.get("image") is None or row.get("id") is None:
            raise UserError(f"{path}: record {i} needs 'id', 'image' and a 'question' string")
        from training.data.formats import image_name

        image_name(row["image"], f"{path}: record {i}")   # the trees are grown from it: checked now
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


# The other ranks wait in a barrier while rank 0 alone scores, builds pairs and evaluates: the entry
# point initialises the process group with this timeout (evalsuite/dist.py, Dist.init_group).
GROUP_TIMEOUT = datetime.timedelta(hours=12)


class _Models:
    """The generator VLM and the CLIP judge, loaded on first use and both released before training
    (the next iteration loads them again), on the device of this rank (`dist`)."""

    def __init__(self, cfg: CSRConfig, dist: Dist | None = None):
        self.cfg, self.dist, self._vlm, self._vlm_path, self._scorer = cfg, dist or Dist(), None, None, None

    def vlm(self, path: str):
        if self._vlm is None or self._vlm_path != str(path):
            from evalsuite.models.vlm import load_vlm

            self._vlm = self._vlm_path = None  # the old generator goes before the new one loads
            _free_memory()
            self._vlm = load_vlm(path, device=self.dist.device(self.cfg.device), dtype=self.cfg.dtype,
                                 inputs=self.cfg.generation_input_config())
            self._vlm_path = str(path)
        return self._vlm

    def scorer(self):
        if self._scorer is None:
            from evalsuite.metrics.relevance import RelevanceScorer

            self._scorer = RelevanceScorer(self.cfg.clip, device=self.dist.device(self.cfg.device), batch_size=self.cfg.reward.clip_batch)
        return self._scorer

    def release(self) -> None:
        """Drop both models (before training; the next use loads them again)."""
        self._vlm = self._vlm_path = self._scorer = None
        _free_memory()


def _free_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


# ---------------------------------------------------------------- stages
def stage_generate(cfg: CSRConfig, models: _Models, ckpt: str, records: list[dict], d: Path) -> None:
    from training.csr.engines import make_tree_engine
    from training.csr.generate import read_trees, write_trees

    dist = models.dist
    rank, world = dist.rank, dist.world_size
    shard = d / f"trees.rank{rank}.jsonl"
    info = _done(d, f"generate.rank{rank}")
    if not info or info.get("world") != world:  # a shard of a run with another world size is another shard
        mine = dist.shard(records)
        if cfg.tree.engine == "vllm":  # one vLLM worker for this checkpoint's trees (training/csr/vllm_expand.py)
            from evalsuite.models.vlm import load_vlm
            from training.csr.vllm_expand import open_sampler

            # the worker holds the weights: this process keeps the processor and configs only (a model on
            # the meta device), and loads the HF model for scoring once the worker has exited
            models.release()
            shell = load_vlm(ckpt, device=dist.device(cfg.device), dtype=cfg.dtype,
                             inputs=cfg.generation_input_config(), weights=False)
            with open_sampler(cfg, shell.inputs, ckpt, world, d / "vllm_worker.log", shell.device) as sampler:
                trees = make_tree_engine(cfg.tree, shell, cfg.image_root, sampler=sampler).grow(mine)
        else:
            trees = make_tree_engine(cfg.tree, models.vlm(ckpt), cfg.image_root).grow(mine)
        write_trees(shard, trees)
        _mark(d, f"generate.rank{rank}", trees=len(trees), world=world)
    dist.barrier()
    if dist.is_main:
        by_id = {t.id: t for r in range(world) for t in read_trees(d / f"trees.rank{r}.jsonl")}
        write_trees(d / "trees.jsonl", [by_id[r["id"]] for r in records])
        _mark(d, "generate", trees=len(records), ranks=world)
    dist.barrier()


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
    result = pair_stats(pairs, skipped, cfg.reward, config={"iteration": t, "generator": str(ckpt)},
                        identity=pairs_identity(cfg))
    write_json_atomic(d / "pair_stats.json", {**result.to_dict(), "skipped": dict(skipped)})
    _write_stats(cfg, ckpt, t, result)
    log.info("iter %d: %d pairs, %d skipped %s", t, len(pairs), sum(skipped.values()), dict(skipped))
    _mark(d, "pairs", pairs=len(pairs), skipped=dict(skipped), pairs_hash=sha256_file(pairs_path))


def pairs_identity(cfg: CSRConfig) -> dict:
    """What makes two iterations' pair statistics comparable: the prompts (by content), the images, the
    search, reward and pair settings (evalsuite/identity.py options_identity: settings that give the same
    trees and scores, marked identity=False, left out) and the judge (by its weights)."""
    from evalsuite.identity import options_identity
    from evalsuite.manifest import checkpoint_hash
    from training.config import without_earlier_meaning
    from training.csr.config import EARLIER_PAIRS
    from training.csr.stages import prompts_id, tree_identity

    return {"prompts": prompts_id(cfg),
            "image_root": str(cfg.image_root), "limit": cfg.limit, "tree": tree_identity(cfg.tree),
            "reward": options_identity(cfg.reward),
            "pairs": without_earlier_meaning(options_identity(cfg.pairs), EARLIER_PAIRS),
            "judge": checkpoint_hash(cfg.clip)}


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
    dist = models.dist
    tcfg = cfg.train_config(ckpt, t, d)
    # a stopped attempt's latest complete checkpoint-N (a signal's save, training/signals.py, or a periodic
    # one): continue from it when it is this configuration's; else its output is removed (resumable_checkpoint
    # logs one line saying why) and training starts afresh
    from training.signals import resumable_checkpoint

    resume = dist.broadcast(resumable_checkpoint(d / "train", tcfg) if dist.is_main else None)
    if dist.is_main:
        for sub in ("merged",) if resume else ("train", "merged"):
            shutil.rmtree(d / sub, ignore_errors=True)
    dist.barrier()
    if resume:
        log.info("iter %d: training continues from %s", t, resume)
        tcfg.resume_from_checkpoint = resume
    tcfg.check_paths()
    merged = str(run_dpo(tcfg))
    if dist.is_main:
        write_json_atomic(d / "manifest.json", {
            "iteration": t, "parent": str(ckpt), "merged": merged, "pairs_hash": info["pairs_hash"],
            "num_pairs": info["pairs"], "config": cfg.to_dict(), "inputs": cfg.input_config().to_dict(),
            "generation_inputs": cfg.generation_input_config().to_dict(),
            "train_config": tcfg.resolved()})
        _mark(d, "train", merged=merged)
    dist.barrier()
    return merged


def stage_eval(cfg: CSRConfig, ckpt: str, label: str, out: Path) -> None:
    """The coupled evaluation, on rank 0 alone (the other ranks wait at the next barrier). A rerun after a
    kill resumes it: `out` holds the same run, finished tasks are in the store, finished answers cached."""
    from evalsuite.run import run_eval

    run_eval(cfg.eval_config(ckpt, label, out), dist=Dist())


# ---------------------------------------------------------------- driver
def run_iteration(cfg: CSRConfig, models: _Models, records: list[dict], ckpt: str, t: int) -> str:
    d = cfg.run_dir / f"iter_{t}"
    d.mkdir(parents=True, exist_ok=True)
    dist = models.dist
    rank = dist.rank
    if not _done(d, "generate"):
        if dist.is_main:   # what the stage runs under, before it starts (training/csr/stages.py)
            stages.record(cfg, d.name, "generate")
        dist.barrier()
        stage_generate(cfg, models, ckpt, records, d)
    for stage, fn in (("score", lambda: stage_score(cfg, models, ckpt, d)),
                      ("pairs", lambda: stage_pairs(cfg, models, ckpt, t, d))):
        if rank == 0 and not _done(d, stage):
            stages.record(cfg, d.name, stage)
            fn()
        dist.barrier()  # unconditional: a rank that saw the marker late must not skip a barrier rank 0 waits in
    done = _done(d, "train")
    if not done and dist.is_main:
        stages.record(cfg, d.name, "train")
    merged = done["merged"] if done else stage_train(cfg, models, ckpt, t, d)
    if rank == 0:   # the training curves, for the report (also on a resumed run that predates them)
        from training.csr.train_log import write_train_log

        write_train_log(cfg, ckpt, merged, t, d)
    if cfg.evaluates and not _done(d, "eval") and rank == 0:
        stages.record(cfg, d.name, "eval")
        stage_eval(cfg, merged, f"{cfg.name}/iter_{t}", d / "eval")
        _mark(d, "eval", tasks=list(cfg.eval.tasks))
    dist.barrier()
    return merged


def run_csr(cfg: CSRConfig | dict | str | Path, dist: Dist | None = None, restart_from: str | None = None) -> list[str]:
    """Run (or resume) the loop; returns the merged checkpoint dirs [M_1, ..., M_T].

    `dist`: where this process sits, resolved by the entry point (`Dist.current()`, with the process
    group initialised: training/train.py); None is a single process. A rerun whose settings differ from
    a stage that ran is refused, or with `restart_from` ("iter_T/STAGE", "base_eval") that stage and what
    depends on it are discarded and recomputed (training/csr/stages.py)."""
    dist = dist or Dist()
    if isinstance(cfg, (str, Path)):
        cfg = load_config(cfg)
    elif isinstance(cfg, dict):
        cfg = CSRConfig.from_dict(cfg)
    _check_dist(dist)
    run_dir = cfg.run_dir
    records = load_prompts(cfg.prompts, cfg.limit)
    stages.check_rerun(cfg, restart_from, discard=dist.is_main)   # every rank refuses alike
    if dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not (run_dir / "config.json").exists():
            write_json_atomic(run_dir / "config.json", cfg.to_dict())
        if cfg.evaluates and not (run_dir / "base_eval.done").exists():
            stages.record(cfg, stages.BASE)
            stage_eval(cfg, cfg.model, f"{cfg.name}/base", run_dir / "base_eval")
            _mark(run_dir, "base_eval", tasks=list(cfg.eval.tasks))
    dist.barrier()
    models = _Models(cfg, dist)
    ckpt, merged = cfg.model, []
    for t in range(1, cfg.iterations + 1):
        ckpt = run_iteration(cfg, models, records, ckpt, t)
        merged.append(ckpt)
        log.info("iteration %d done: %s", t, ckpt)
    models.release()
    return merged


def _check_dist(dist: Dist) -> None:
    """A single-process `dist` inside an initialised multi-rank group would make every rank write as
    rank 0: refuse it (the caller forgot to pass the entry point's Dist)."""
    if dist.distributed or "torch" not in sys.modules:
        return
    import torch.distributed as td

    if td.is_available() and td.is_initialized() and td.get_world_size() > 1:
        raise UserError(f"run_csr: this process is rank {td.get_rank()} of {td.get_world_size()}, "
                        "but run_csr was given a single-process Dist: pass the entry point's Dist.current()")

