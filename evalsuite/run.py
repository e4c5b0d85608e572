"""The evaluation workflow behind `evalsuite run`: check -> plan -> run each task -> save -> store.

    evalsuite run --ckpt runs/demo/iter_1/model --tasks chair,pope,mme,relevance --clip CLIP --data-root W
    run_eval(load_eval_config([...])[0])          # the same from Python (training/csr/loop.py)

1. Checks, all before any model loads: the task names, the options each own task declares required (one
   line naming section.key and what to pass), the checkpoint directory, the output directory
   (see below), every own task's plan (options, annotations, NLTK data, CLIP dir, image sample: each
   plan states the task's identity, hence its eval_key), the lmms tasks' data.
2. Rank, world size and device are resolved once (evalsuite/dist.py) into a frozen RunContext.
3. One loop over the planned steps, own tasks and lmms-eval names alike (both follow the Task protocol,
   evalsuite/tasks/base.py). One reuse rule: a step every result of which (`Plan.result_keys()`: a group's
   leaves) the store holds for this ModelId is not run or stored again (logged), unless --rerun.
4. Each finished result is written to the output directory and the store before the next one starts.
   One resume rule: the per-sample answer caches (own tasks in STORE/.resume/own, evalsuite/tasks/answers.py;
   lmms tasks in STORE/.resume/lmms), so a killed run started again regenerates only what was missing.

The output directory belongs to one run: OUT/run.json is written when the first task starts. Started
again with the same configuration (and checkpoint), the run resumes under its run id; a non-empty
directory holding anything else is refused. OUT/.lock (flock) keeps two processes out of one OUT.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from dataclasses import dataclass
from pathlib import Path

from evalsuite.dist import Dist
from evalsuite.errors import RunFailure, UserError
from evalsuite.files import ensure_writable_dir, write_json_atomic, write_jsonl_atomic
from evalsuite.run_config import EvalConfig
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.types import TaskResult

log = logging.getLogger(__name__)

BUILTIN_WORLD_IMAGES = 600
ANSWER_FIELDS = ("key", "image_id", "image", "prompt", "answer")   # what a task hands to the tasks requiring it
LOCK = ".lock"


def default_world_dir() -> Path:
    import os

    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evalsuite"
    return base / f"world-seed0-{BUILTIN_WORLD_IMAGES}"


def ensure_builtin_world() -> Path:
    """The built-in synthetic world, built once into the cache dir.

    Built beside the target and renamed onto it: a rename onto an existing world fails, so two
    first-time runs racing here never remove each other's world (build_world itself replaces `out`)."""
    import shutil
    import tempfile

    from evalsuite.world.build import build_world

    target = default_world_dir()
    if (target / "world.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".world-"))
    log.info("building the built-in synthetic world into %s (first use)", target)
    build_world(tmp, images=BUILTIN_WORLD_IMAGES, seed=0)
    try:
        tmp.rename(target)
    except OSError:  # another process won the race; theirs is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def split_tasks(names: list[str]) -> tuple[list[str], list[str]]:
    """(evalsuite's own tasks, lmms-eval task names), each in the given order."""
    from evalsuite.tasks.registry import is_own_task

    return [n for n in names if is_own_task(n)], [n for n in names if not is_own_task(n)]


def check_task_names(names: list[str], quick: bool = False) -> None:
    """UserError for a name no task has: `quick`, the check that needs no lmms-eval import (a name in no
    lmms-eval yaml); else lmms-eval's own index (run_eval runs the quick check first)."""
    from evalsuite.tasks.registry import LMMS_LOCAL_TASKS, TASKS

    if not names:
        raise UserError("--tasks: no task given")
    _, lmms = split_tasks(names)
    if lmms:
        from evalsuite.lmms.names import refuse_unknown
        from evalsuite.lmms.task import validate_task_names

        if quick:   # a name in no lmms-eval yaml is refused now, before lmms-eval's import and index (10-30 s)
            refuse_unknown(lmms, own=list(TASKS) + list(LMMS_LOCAL_TASKS))
        else:       # run_eval made the quick check first
            validate_task_names(lmms, known_own=list(TASKS) + list(LMMS_LOCAL_TASKS))


def run_meta(cfg: EvalConfig, run_id: str, ckpt_hash: str, data_root: Path | None) -> dict:
    from evalsuite.config import to_plain
    from evalsuite.manifest import read_manifest, resolve_parent
    from evalsuite.version import code_version, lmms_eval_version

    manifest = read_manifest(cfg.ckpt) or {}
    return {
        "run_id": run_id,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ckpt": str(Path(cfg.ckpt).resolve()),
        "ckpt_hash": ckpt_hash,
        "iteration": manifest.get("iteration"),
        "method": manifest.get("method"),
        "parent": resolve_parent(manifest.get("parent")),
        "label": cfg.label,
        "data_root": str(data_root) if data_root else None,
        "config": to_plain(cfg),
        "code_version": code_version(),
        "lmms_eval_version": lmms_eval_version(),
    }


def save_task(out: Path, result: TaskResult) -> None:
    write_jsonl_atomic(out / result.task / "samples.jsonl", result.samples)
    write_json_atomic(out / result.task / "result.json", result.to_dict())


def store_run_id(eval_run: str, task: str, used: set[str]) -> str:
    """The store run id of one task's result: `<eval run>-<task>`, with a group leaf's `/` (pope_full/pope_adv)
    and anything else the store refuses turned into '.', unique within the eval run (deterministic in task
    order, so a resumed run finds the ids it wrote before it was stopped)."""
    import re

    base = f"{eval_run}-{re.sub(r'[^A-Za-z0-9._-]+', '.', task)}"[:120]
    run_id, i = base, 1
    while run_id in used:
        i += 1
        run_id = f"{base}.{i}"
    used.add(run_id)
    return run_id


@dataclass
class Step:
    """One task of the run, planned: `stored` False = run only for the answers another task requires."""

    name: str
    task: object
    plan: Plan
    requires: tuple[str, ...]
    stored: bool


def own_tasks_of_run(cfg: EvalConfig, own: list[str], within: str = "") -> dict[str, tuple]:
    """{name: (task, options, requires)} of every own task a run of `own` plans, the tasks each requires
    first (a required task not asked for included). Each task's declared required options are checked
    here (registry.check_required; `within`: the section holding `cfg`, the CSR loop's "eval"), so a run
    missing one is refused before anything is planned."""
    from evalsuite.tasks.registry import check_required, load_task, section_of

    out: dict[str, tuple] = {}

    def add(name: str) -> None:
        if name in out:
            return
        task = load_task(name)
        # a task's options section (amber_g and amber_d share `amber`); a task without one: its defaults
        opts = getattr(cfg, section_of(name), None) or task.Options()
        check_required(name, opts, within)
        requires = tuple(task.requires(opts, cfg.tasks))
        for dep in requires:
            add(dep)
        out[name] = (task, opts, requires)

    for name in own:
        add(name)
    return out


def plan_own_tasks(ctx: RunContext, tasks: dict[str, tuple], own: list[str]) -> list[Step]:
    """Every own task of `tasks` (own_tasks_of_run's) planned (no model), tasks a task requires first; a
    required task not in `own` is a dependency whose answers are used and whose result is not stored."""
    steps: dict[str, Step] = {}
    for name, (task, opts, requires) in tasks.items():
        plan = task.plan(ctx, opts, {d: steps[d].plan for d in requires})
        steps[name] = Step(name, task, plan, requires, stored=name in own)
    for step in steps.values():
        if not step.stored:
            log.info("%s: runs for the answers other tasks require; its own result is not stored (not in tasks)",
                     step.name)
    return list(steps.values())


def plan_lmms_tasks(ctx: RunContext, cfg: EvalConfig, lmms: list[str]) -> list[Step]:
    """Every lmms-eval name planned (its leaves' data checked, their eval_keys stated; no model), sharing
    one lmms-eval model made on the first run, keyed by the run's ModelId (an edited chat template misses
    the lmms response cache)."""
    if not lmms:
        return []
    from evalsuite.lmms.task import lmms_tasks
    from evalsuite.tasks.registry import is_own_task, task_class

    own_judge = any(getattr(task_class(t), "uses_judge", False) for t in cfg.tasks if is_own_task(t))
    tasks = lmms_tasks(ctx, lmms, cfg.lmms, seed=cfg.seed, backend=lambda: ctx.backend(model_identity(ctx)),
                       results_json=ctx.output_dir / "lmms_results.json", judge_elsewhere=own_judge)
    return [Step(t.name, t, t.plan(ctx, cfg.lmms, {}), (), stored=True) for t in tasks]


def model_identity(ctx: RunContext):
    """The run's ModelId (evalsuite/identity.py): weights, prompt files, prompt settings, device type,
    dtype. The own-task answer cache, the lmms-eval response cache and store reuse all key on it."""
    from evalsuite.identity import ModelId

    return ModelId.of(ctx.ckpt, ctx.loader.inputs, **ctx.model_setup())


def run_eval(cfg: EvalConfig, dist: Dist | None = None) -> dict:
    """Run every task of `cfg` on its checkpoint; {run_id, output_dir, tasks: {task: result dict}}.

    dist: where this process sits in a data-parallel launch (default: resolved from the launcher now).
    Under world size > 1 own tasks shard their images across ranks and rank 0 gathers the answers,
    scores and writes; lmms-eval tasks split their documents the same way."""
    from evalsuite.config import to_plain
    from evalsuite.precheck import check_before_claim
    from evalsuite.outdir import OutputDir
    from evalsuite.store import Store, new_run_id

    dist = dist or Dist.current()
    check_task_names(cfg.tasks, quick=True)  # a misspelled name: refused in about a second, before torch loads
    own, lmms = split_tasks(cfg.tasks)
    own_tasks = own_tasks_of_run(cfg, own)  # a required task option not given: refused before the checkpoint
    check_before_claim(cfg)     # checkpoint, text encodings, free space: before any work (evalsuite/precheck.py)
    check_task_names(cfg.tasks)
    # a bad --store/--output must fail now, not after hours of generation
    ensure_writable_dir(cfg.store, "--store", create=False)
    if cfg.output:
        ensure_writable_dir(cfg.output, "--output", create=False)
    engine = cfg.engine_spec()          # --engine vllm: its environment checked now (docs/engines.md)
    data_root = Path(cfg.data_root) if cfg.data_root else (ensure_builtin_world() if cfg.world else None)
    if data_root is not None and not data_root.is_dir():
        raise UserError(f"--data-root {data_root}: not a directory")
    dist.init_group()
    config = to_plain(cfg)
    store = Store(cfg.store)
    ctx = RunContext(
        ckpt=cfg.ckpt, data_root=data_root, output_dir=None, dist=dist, device=dist.device(cfg.device), dtype=cfg.dtype,
        limit=cfg.limit, batch_size=cfg.batch_size, gen=cfg.gen_config(), trust_remote_code=cfg.trust_remote_code,
        inputs=cfg.inputs, resume_root=Path(cfg.store) / ".resume", judge=cfg.judge)
    if engine is not None:  # the checkpoint is checked against what vLLM loads now (evalsuite/engines/vllm_check.py)
        from evalsuite.engines.base import make_engine
        from evalsuite.models.vlm import resolve_dtype

        ctx = dataclasses.replace(ctx, engine=make_engine(engine, ctx.loader, ctx.device_type, resolve_dtype(
            ctx.device_type, ctx.dtype), ctx.batch_size, dist.world_size))
    model = model_identity(ctx)
    ckpt_hash = model.weights
    run_id, outdir = None, None
    if dist.is_main:
        outdir = OutputDir(cfg.output) if cfg.output else None
        run_id = (outdir.existing_run(config, ckpt_hash, model.key()) if outdir else None) or new_run_id()
    run_id = dist.broadcast(run_id)
    out = Path(cfg.output) if cfg.output else Path(cfg.store) / "runs" / run_id
    ctx = dataclasses.replace(ctx, output_dir=out, ckpt_id=model.key(), engine=ctx.engine.writing_to(out))
    # the prompt format now: a checkpoint without one fails before any generation (docs/inputs.md)
    prompt_record = ctx.loader.prompts().describe()
    # fail on bad options or missing data before any generation
    steps = plan_own_tasks(ctx, own_tasks, own) + plan_lmms_tasks(ctx, cfg, lmms)

    # every check passed. A rerun the store serves entirely, with no --output asked for, writes no run folder
    reused = _stored_already(ctx, steps, store, ckpt_hash, cfg, dist)
    if not cfg.output and all(st.name in reused for st in steps if st.stored):
        tasks = {name: {"task": name, "eval_key": key, "reused": store_run, "metrics": []}
                 for found in reused.values() for name, (key, store_run) in found.items()}
        if dist.is_main:
            log.info("every task already in the store for this checkpoint and setup (%s); nothing run, no run "
                     "folder written (--rerun runs and stores them again)",
                     ", ".join(f"{n}: run {t['reused']}" for n, t in tasks.items()))
        ctx.engine.close()  # the engine worker, if one started
        return {"run_id": None, "output_dir": None, "tasks": tasks}
    # the run starts, and owns its output directory from here on
    meta = run_meta(cfg, run_id, ckpt_hash, data_root)
    meta["model_id"] = ctx.ckpt_id  # store reuse matches it: an edited chat template is another model
    meta["inputs"] = prompt_record  # the settings, the format in use and the prompt around {question}
    summary: dict[str, dict] = {}
    if dist.is_main:
        outdir = outdir or OutputDir(out)
        meta["run_id"] = outdir.claim(meta, config, ckpt_hash)
        summary = outdir.summary()
    run_id = meta["run_id"] = dist.broadcast(meta["run_id"])
    try:
        _run_tasks(ctx, cfg, steps, store, meta, summary, ckpt_hash, reused)
    finally:
        ctx.engine.close()  # the engine worker, if one started
        if outdir is not None:
            outdir.release()
    if dist.is_main:  # one line per run, not one per rank (the other ranks wrote nothing)
        log.info("run %s -> %s (store %s)", run_id, out, cfg.store)
    return {"run_id": run_id, "output_dir": str(out), "tasks": summary}


def _run_tasks(ctx: RunContext, cfg: EvalConfig, steps: list[Step], store, meta: dict, summary: dict,
               ckpt_hash: str, reused: dict | None = None) -> None:
    from evalsuite.store.store import refuse_empty

    dist, out, run_id = ctx.dist, ctx.output_dir, meta["run_id"]
    used_ids: set[str] = set()

    def finish(result: TaskResult) -> None:
        # the store's rule, checked before anything is written: a group aggregate of lmms-eval has no
        # per-sample rows of its own, only metrics counting its members' samples
        refuse_empty([result])
        rid = store_run_id(run_id, result.task, used_ids)
        try:
            save_task(out, result)
            # one store run per task, so each lands as soon as it finishes; eval_run groups them
            if (store.metrics_dir / f"{rid}.parquet").exists():  # stored by this run before it was stopped
                log.info("%s: already stored by this run as %s", result.task, rid)
            else:  # the "already stored" check and the write under one store lock (concurrent runs)
                got = store.write_run_once({**meta, "run_id": rid, "eval_run": run_id}, [result], ckpt_hash,
                                           dedup=not cfg.rerun)
                if got != rid:
                    log.info("%s: stored meanwhile by run %s; not stored again", result.task, got)
            summary[result.task] = result.to_dict()
            write_json_atomic(out / "summary.json", summary)
        except OSError as e:  # e.g. the disk filled or went read-only mid-run; writes are atomic
            raise RunFailure(f"{result.task}: cannot write its results ({e.strerror or e}"
                             f"{': ' + str(e.filename) if e.filename else ''}); tasks finished before it are "
                             f"kept in {out} and {cfg.store}") from None
        except (MemoryError, ValueError) as e:  # the store writer (pyarrow) out of memory, or refusing a value
            raise RunFailure(f"{result.task}: cannot store its results ({type(e).__name__}: "
                             f"{(str(e).splitlines() or [''])[0][:200]}); its answers are kept, so the same "
                             "command again stores it without generating them again") from None
        log.info("%s: %s", result.task, ", ".join(f"{m.metric}={m.value:.4g}" for m in result.metrics))

    def mark_reused(name: str, key: str, store_run: str) -> None:
        if not dist.is_main:
            return
        log.info("%s: already in the store for this checkpoint and setup (run %s, eval_key %s); not run "
                 "or stored again", name, store_run, key)
        if name not in summary:
            summary[name] = {"task": name, "eval_key": key, "reused": store_run, "metrics": []}
            write_json_atomic(out / "summary.json", summary)

    if reused is None:
        reused = _stored_already(ctx, steps, store, ckpt_hash, cfg, dist)
    needed = {d for st in steps if st.stored and st.name not in reused for d in st.requires}
    answers: dict[str, list[dict] | None] = {}
    for st in steps:
        for name, (key, store_run) in reused.get(st.name, {}).items():
            mark_reused(name, key, store_run)
        if st.name in reused or not st.stored:
            if st.name in needed:  # answers only: from the resume cache, generated where missing
                answers[st.name] = st.task.answers(ctx, st.plan)
            continue
        ran = st.task.run(ctx, st.plan, {d: answers[d] for d in st.requires})
        results = ran if isinstance(ran, list) else [] if ran is None else [ran]   # lmms: a list
        if st.name in needed:
            answers[st.name] = None if not results else [{k: s[k] for k in ANSWER_FIELDS} for s in results[0].samples]
        for result in results:
            finish(result)


def _stored_already(ctx: RunContext, steps: list[Step], store, ckpt_hash: str, cfg: EvalConfig,
                    dist: Dist) -> dict[str, dict[str, tuple[str, str]]]:
    """{step: {result name: (eval_key, store run)}} of the stored steps every result of which the store holds
    for this checkpoint and ModelId (none with --rerun; a key known only once the step ran never matches);
    rank 0 reads the store, every rank follows its answer."""
    found: dict = {}
    if dist.is_main and not cfg.rerun:
        for st in steps:
            keys = st.plan.result_keys() if st.stored else {}
            runs = {name: store.has_result(ckpt_hash, key, model_id=ctx.ckpt_id) if key else None
                    for name, key in keys.items()}
            if runs and all(runs.values()):
                found[st.name] = {name: (keys[name], runs[name]) for name in keys}
    return dist.broadcast(found)
