"""The bridge `evalsuite run` calls for every task name that is not evalsuite's own: lmms-eval tasks.

    specs = resolve_specs(["mme", "pope_full", "scienceqa_img"], data_root=W, split="val",
                          data={"scienceqa_img": "sqa.parquet"}, limit=None)
    for result in iter_lmms_tasks(specs, ckpt=CK, ...):   # TaskResults as each name finishes; names work too

Order of work (all checks before the model is loaded, so a typo costs seconds, not a model load):
1. resolve each name: evalsuite's local tasks (`LMMS_LOCAL_TASKS`: mme -> evalsuite_mme, ...) or any
   lmms-eval task, group or tag, as a tree down to its leaf tasks;
2. resolve every leaf's data: `data[leaf]` (the eval config's `lmms.data.<task>`: file(s), imagefolder,
   save_to_disk dir, hub snapshot), else for the local tasks the world at `data_root/questions/`, else
   lmms-eval's hub dataset if it is already in the local HF cache. Anything else is a UserError naming
   the task and the option; so is a `data` key that names no task of the run;
3. one `simple_evaluate` per name (resume granularity), through a model that caches every finished
   batch (`evalsuite.models.cache`), so a rerun after a crash regenerates only the missing samples.

A group (or tag) reports each leaf as `NAME/LEAF` (pope_full/pope_adv), plus `NAME` itself when lmms-eval
aggregates the group. On data-parallel runs every rank calls this; only rank 0 gets results, the others
get []. Scores are lmms-eval's own, converted to MetricValue without recomputation (evalsuite/lmms/results.py).
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from evalsuite.dist import Dist
from evalsuite.errors import RunFailure, UserError
from evalsuite.lmms.data import (
    DATA_KEY, check_hub_cached, content_fingerprint, data_fingerprint, data_override, world_files,
)
from evalsuite.lmms.judged import JudgeAbort
from evalsuite.tasks.registry import LMMS_LOCAL_TASKS, local_name
from evalsuite.types import TaskResult

log = logging.getLogger(__name__)


@dataclass
class Leaf:
    """One lmms-eval leaf task of a run and where its documents come from."""

    lmms_task: str          # lmms-eval's task name (evalsuite_pope_adversarial, scienceqa_img)
    name: str               # how evalsuite reports it: the user's name, or NAME/LEAF in a group
    key: str                # its key in `data` (lmms.data.<key>): the user's name, or the leaf's own
    source: str = ""        # where its docs come from (file paths or a hub id): tables, run.json
    override: dict = field(default_factory=dict)   # dataset keys pointing it at local data ({}: its own)
    cache_tag: str = ""     # response-cache namespace: task + cheap data fingerprint
    data_id: str = ""       # content fingerprint of its data (TaskResult.identity)
    paired: bool = False
    version: str | None = None  # its yaml's metadata version (None: known only once lmms-eval ran it)
    network: list = field(default_factory=list)   # where its scoring calls a model over the network (judged.py)
    judge: dict | None = None   # the judge's identity, for a judged leaf of a run with --judge


@dataclass
class LmmsSpec:
    name: str                       # as the user wrote it
    lmms_name: str                  # the lmms-eval task, group or tag that runs
    kind: str                       # "task" | "group" | "tag"
    tasks: list                     # what simple_evaluate gets: names, override dicts, group dicts
    leaves: list[Leaf]
    builtin: bool = False           # needs lmms-eval's own task index (~10 s to build)

    def leaf(self, lmms_task: str) -> Leaf | None:
        return next((lf for lf in self.leaves if lf.lmms_task == lmms_task), None)


class LmmsRunError(RunFailure):
    """An lmms-eval task failed while running (model or scoring); finished samples stay cached."""


def validate_task_names(names: list[str], known_own: list[str] | None = None) -> None:
    """UserError for a name that is neither local nor an lmms-eval task/group/tag (data not checked yet)."""
    others = [n for n in names if n not in LMMS_LOCAL_TASKS]
    if not others:
        return
    from evalsuite.lmms import backend as lb

    tm = lb.task_manager(include_defaults=True)
    unknown = [n for n in others if n not in tm.task_index]
    if unknown:
        own = ", ".join(sorted(set(known_own or []) | set(LMMS_LOCAL_TASKS)))
        raise UserError(f"--tasks {','.join(unknown)}: unknown task (not an evalsuite task ({own}) nor an "
                        "lmms-eval task, group or tag)")


def resolve_specs(names: list[str], *, data_root=None, split: str = "val", data: dict | None = None,
                  limit: int | None = None) -> list[LmmsSpec]:
    """Every name as a tree of leaves with their data; lmms-eval's full index is read only if needed."""
    from evalsuite.lmms import backend as lb

    data = dict(data or {})
    specs = []
    for name in names:
        local = LMMS_LOCAL_TASKS.get(name)
        tm = lb.task_manager(include_defaults=local is None)
        node = lb.task_node(tm, local.lmms_task if local else name)
        if node is None or not node.leaves():
            raise UserError(f"--tasks {name}: unknown task (neither an evalsuite task nor an lmms-eval task, "
                            "group or tag with tasks; `evalsuite tasks` lists evalsuite's)")
        specs.append(_spec(lb, tm, name, node, data, data_root, split, builtin=local is None))
    _check_run(specs, data, limit)
    return specs


def _spec(lb, tm, name: str, node, data: dict, data_root, split: str, builtin: bool) -> LmmsSpec:
    if node.kind != "task" and name in data:
        keys = ", ".join(f"{DATA_KEY}.{_leaf_key(lf)}" for lf in node.leaves())
        raise UserError(f"{DATA_KEY}.{name}: {name} is a {node.kind} of {len(node.leaves())} tasks; map the "
                        f"data of each task instead ({keys})")
    leaves = []
    for lf in node.leaves():
        key = name if node.kind == "task" else _leaf_key(lf)
        leaf = Leaf(lf.name, name if node.kind == "task" else f"{name}/{key}", key)
        _leaf_data(leaf, lf, name, data.get(key), data_root, split)
        leaves.append(leaf)
    by_task = {lf.lmms_task: lf for lf in leaves}
    tasks = _eval_items(lb, tm, node, by_task)
    return LmmsSpec(name, node.name, node.kind, tasks, leaves, builtin)


def _leaf_key(node) -> str:
    """A leaf's name for users: evalsuite's name for its own yaml tasks (pope_adv), else lmms-eval's."""
    return local_name(node.name) or node.name


def _leaf_data(leaf: Leaf, node, top: str, data_opt, data_root, split: str) -> None:
    from evalsuite.lmms.judged import network_calls
    from evalsuite.lmms.results import config_version

    cfg = node.config
    leaf.version = config_version(cfg)
    leaf.network = network_calls(node.path, cfg) if node.path else []
    local = LMMS_LOCAL_TASKS.get(local_name(node.name) or "")
    leaf.paired = bool(local and local.paired)
    yaml_split = cfg.get("test_split") or cfg.get("validation_split")
    if data_opt is None and local is not None:
        data_opt = [str(f) for f in world_files(leaf.key, local.world_files, data_root, split)]
    if data_opt is not None:
        leaf.override = data_override(leaf.key, data_opt, split=yaml_split, dataset_name=cfg.get("dataset_name"))
        kwargs = leaf.override.get("dataset_kwargs", {})
        files = kwargs.get("data_files", {}).get(yaml_split)
        leaf.source = ", ".join(files) if files else str(kwargs.get("data_dir") or leaf.override["dataset_path"])
        task = {"task": leaf.lmms_task, **leaf.override}
    else:
        check_hub_cached(top, leaf.key, cfg)
        leaf.source = "hub:" + "/".join(str(x) for x in (cfg.get("dataset_path"), cfg.get("dataset_name")) if x)
        task = {"dataset_path": cfg.get("dataset_path"), "dataset_name": cfg.get("dataset_name")}
    leaf.cache_tag = f"{leaf.lmms_task}.{data_fingerprint(task)}"
    leaf.data_id = content_fingerprint(task)


def _eval_items(lb, tm, node, by_task: dict[str, Leaf]) -> list:
    """What simple_evaluate gets for `node`: bare names where nothing is overridden, else override dicts
    (a group becomes a dict config with the group yaml's own keys, so lmms-eval still aggregates it)."""
    if node.kind == "task":
        override = by_task[node.name].override
        if not override:
            return [node.item or node.name]
        base = dict(node.item) if isinstance(node.item, dict) else {"task": node.name}
        return [{**base, **override}]
    if not any(by_task[lf.name].override for lf in node.leaves()):
        return [node.name]
    children = [item for child in node.children for item in _eval_items(lb, tm, child, by_task)]
    if node.kind == "tag":
        return children
    return [{**lb.group_config(tm, node.name), "group": node.name, "task": children}]


def _check_run(specs: list[LmmsSpec], data: dict, limit: int | None) -> None:
    seen: dict[str, str] = {}
    for spec in specs:
        for leaf in spec.leaves:
            if leaf.lmms_task in seen:
                raise UserError(f"--tasks {seen[leaf.lmms_task]},{spec.name}: both run lmms-eval task "
                                f"{leaf.lmms_task}; list it once")
            seen[leaf.lmms_task] = spec.name
            if leaf.paired and limit is not None and limit % 2:
                raise UserError(f"--limit {limit}: {leaf.name} scores question pairs (2 per image); use an even limit")
    known = {leaf.key for spec in specs for leaf in spec.leaves}
    unused = sorted(set(data) - known)
    if unused:
        raise UserError(f"{DATA_KEY}.{unused[0]}: {unused[0]} is not a task of this run "
                        f"(its lmms-eval tasks: {', '.join(sorted(known))})")


def leaf_keys(spec: LmmsSpec, *, limit: int | None, gen_kwargs: str | dict | None, inputs: dict | None,
              setup: dict) -> dict[str, str | None]:
    """{leaf name: the eval_key its result will have} before anything runs (None where the version is
    known only from lmms-eval's run): what `evalsuite run` looks up in the store to reuse a result."""
    from evalsuite.lmms.results import leaf_identity
    from evalsuite.types import eval_key

    return {lf.name: None if lf.version is None else eval_key(lf.name, lf.version, leaf_identity(
        lf.lmms_task, lf.data_id, limit=limit, gen_kwargs=gen_kwargs, inputs=inputs, setup=setup, judge=lf.judge))
        for lf in spec.leaves}


def backend_setup(backend, seed: int) -> dict:
    """{"seed", "device" (type, not index), "dtype"} of a run on `backend` (lmms_results.leaf_identity)."""
    setup = {"seed": seed, "device": str(backend.device).split(":")[0], "dtype": getattr(backend, "dtype", None)}
    return {**setup, **(getattr(backend, "engine_identity", None) or {})}  # another engine: another result


class LmmsRunner:
    """One model adapter for every lmms-eval name of a run: one response cache, one lmms-eval results
    layout (`results_json`). `backend`: the model, or a callable making it on first use (a run whose
    lmms tasks are all in the store never loads the model)."""

    def __init__(self, backend, *, batch_size: int = 8, cache_root=None, dist: Dist | None = None,
                 gen_kwargs: str | None = None, bootstrap_iters: int = 100, limit: int | None = None,
                 results_json=None, seed: int = 0):
        self._backend, self.batch_size, self.cache_root = backend, batch_size, cache_root
        self.dist = dist or Dist.current()
        self.gen_kwargs, self.bootstrap_iters, self.limit = gen_kwargs, bootstrap_iters, limit
        self.results_json, self.seed = results_json, seed
        self.judge, self.judge_root, self.judge_log_dir = None, None, None   # lmms_tasks/resolve_judge
        self._lm = None
        self.layout: dict = {}

    def _model(self):
        if self._lm is None:
            from evalsuite.lmms import backend as lb

            if callable(self._backend) and not hasattr(self._backend, "generate"):
                self._backend = self._backend()
            self._lm = lb.make_model(self._backend, batch_size=self.batch_size, cache_root=self.cache_root,
                                     dist=self.dist)
        return self._lm

    def run(self, spec: LmmsSpec) -> list[TaskResult]:
        """One `simple_evaluate` for `spec`: its leaves' results (and its aggregates), [] on ranks != 0."""
        from evalsuite.lmms import backend as lb
        from evalsuite.lmms.results import merge_layout, to_task_results

        lm = self._model()
        lm.reset_counts()
        log.info("lmms-eval %s %s (%s) on %s", spec.kind, spec.name, spec.lmms_name,
                 "; ".join(lf.source for lf in spec.leaves))
        lm.cache_tags.update({lf.lmms_task: lf.cache_tag for lf in spec.leaves})
        judged = self.judge is not None and any(lf.judge for lf in spec.leaves)
        try:
            with self._judging(spec) if judged else contextlib.nullcontext() as binding:
                raw = lb.evaluate(lm, spec.tasks, limit=self.limit, gen_kwargs=self.gen_kwargs,
                                  bootstrap_iters=self.bootstrap_iters, include_defaults=spec.builtin, seed=self.seed,
                                  output_path=self._output_path(spec) if judged else None)
                if judged and binding.failure:   # asked through the endpoint: lmms-eval scored the failure
                    raise JudgeAbort(binding.failure)
        except UserError:
            raise
        except JudgeAbort as exc:
            raise LmmsRunError(f"{exc}; nothing of {spec.name} is stored; the replies so far are cached and the "
                               f"{lm.counts['generated']} newly finished answers are kept in {self.cache_root}") from None
        except Exception as exc:
            raise LmmsRunError(
                f"{spec.name}: lmms-eval run failed ({type(exc).__name__}: {exc}); {lm.counts['generated']} "
                f"newly finished samples are kept in {self.cache_root} and will not be regenerated"
            ) from exc
        # nothing scores nothing (evalsuite/tasks/answers.py): rank 0 counts every rank's answers per leaf
        # and every rank fails together, before any of this name's results is written or stored
        from evalsuite.tasks.answers import fail_together

        parts = self.dist.gather(lm.answer_counts())
        fail_together(self.dist, None if parts is None else empty_answers_failure(spec, parts))
        if raw is None:  # ranks != 0
            return []
        unparsable = self._unparsable(spec, binding) if judged else {}
        if self.results_json is not None:
            merge_layout(self.layout, raw, Path(self.results_json))
        results = to_task_results(spec, raw, dict(lm.counts), gen_kwargs=self.gen_kwargs, limit=self.limit,
                                  bootstrap_iters=self.bootstrap_iters, backend=self._backend,
                                  setup=backend_setup(self._backend, self.seed))
        if judged:
            for r in results:
                if r.identity.get("judge"):
                    r.extra["judge"] = self.judge.describe()
                    r.extra["judge_replies"] = dict(binding.stats)   # of the whole name (one binding per name)
                counts = unparsable.get(r.extra.get("lmms_task"))
                if counts is not None:
                    from evalsuite.types import MetricValue

                    r.extra.update(unparsable=counts["unparsable"], judged=counts["judged"])
                    r.metrics.append(MetricValue("unparsable_rate", counts["unparsable"] / counts["judged"],
                                                 higher_is_better=False, n=counts["judged"]))
        return results

    def _unparsable(self, spec: LmmsSpec, binding) -> dict:
        """{lmms task: counts} of the judged leaves' unparsable judgments (judged.py); a leaf with more than
        half unparsable fails the whole name in one line, before anything of it is written or stored."""
        from evalsuite.lmms.judged import unparsable_failure

        out = {}
        for leaf in spec.leaves:
            counts = binding.counts(leaf.lmms_task)
            if counts is None or not counts["judged"]:
                continue
            message = unparsable_failure(leaf.name, counts)
            if message:
                raise LmmsRunError(message)
            out[leaf.lmms_task] = counts
        return out

    def _output_path(self, spec: LmmsSpec) -> str | None:
        """A fresh folder for lmms-eval's `--output_path`, for tasks whose aggregation keeps files there
        (hallusion_bench re-reads a previous run's judgments by position): OUT/lmms-eval/<name>."""
        from evalsuite.lmms.judged import NEEDS_OUTPUT_PATH

        if not any(lf.lmms_task in NEEDS_OUTPUT_PATH for lf in spec.leaves):
            return None
        import shutil
        import tempfile

        base = Path(self.judge_log_dir) if self.judge_log_dir else Path(tempfile.mkdtemp(prefix="evalsuite-lmms-"))
        folder = base / "lmms-eval" / spec.name.replace("/", ".")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        return str(folder)

    def _judging(self, spec: LmmsSpec):
        """lmms-eval's judge bound to the run's judge while `spec` runs (evalsuite/lmms/judged.py)."""
        from evalsuite.lmms.judged import bound, install

        install(self.judge)
        return bound(self.judge, self.judge_root, f"lmms-{spec.name.replace('/', '.')}", self.judge_log_dir,
                     self.dist.rank, judged=tuple(lf.lmms_task for lf in spec.leaves if lf.judge))


def empty_answers_failure(spec: LmmsSpec, parts: list[dict]) -> str | None:
    """The empty-answers failure of `spec` (one line, evalsuite/tasks/answers.py's rule per leaf) from every
    rank's `EvalsuiteLMM.answer_counts()`, or None. A failing leaf fails the whole name: a group's aggregate
    counts it too, so nothing of the name is stored; the other failing leaves are named as well."""
    from evalsuite.tasks.answers import MAX_EMPTY_SHARE, empty_answers_message

    failures = []
    for leaf in spec.leaves:
        counts = [p[leaf.lmms_task] for p in parts if leaf.lmms_task in p]
        total, empty = sum(c["total"] for c in counts), sum(c["empty"] for c in counts)
        sample = next((c["sample"] for c in counts if c["sample"] is not None), None)
        if sample is None:
            continue
        doc, prompt, answer = sample
        prompt = prompt if len(prompt) <= 200 else prompt[:200] + "..."
        # a group's leaf: the name the user asked for is what is not stored
        message = empty_answers_message(leaf.name, total, empty, f"doc {doc}, prompt {prompt!r} -> answer {answer!r}",
                                        "it" if spec.name == leaf.name else spec.name)
        if message:
            failures.append((leaf.name, message))
    if not failures:
        return None
    message = failures[0][1]
    others = [name for name, _ in failures[1:]]
    return message + (f" Also more than {MAX_EMPTY_SHARE:.0%} empty: {', '.join(others)}." if others else "")


class LmmsTask:
    """One lmms-eval name of `evalsuite run` (a task, group or tag) behind the Task protocol
    (evalsuite/tasks/base.py): `plan` states the eval_key of every leaf (`Plan.outputs`; a group's
    aggregate is stored with its leaves), `run` returns the leaves' results (and the aggregates)."""

    version = "lmms"
    Options = None

    def __init__(self, spec: LmmsSpec, runner: LmmsRunner, *, seed: int, gen_kwargs):
        self.spec, self.runner, self.seed, self.gen_kwargs = spec, runner, seed, gen_kwargs
        self.name = spec.name

    def requires(self, opts, tasks) -> tuple[str, ...]:
        return ()

    def plan(self, ctx, opts, sources):
        from evalsuite.tasks.base import Plan

        setup = {"seed": self.seed, **ctx.model_setup()}
        keys = leaf_keys(self.spec, limit=ctx.limit, gen_kwargs=self.gen_kwargs,
                         inputs=ctx.loader.inputs.identity(), setup=setup)
        return Plan(self.name, self.version, {"leaves": keys}, {"lmms_task": self.spec.lmms_name},
                    state=self.spec, outputs=keys)

    def run(self, ctx, plan, inputs) -> list[TaskResult]:
        return self.runner.run(plan.state)


def lmms_tasks(ctx, names: list[str], opts, *, seed: int, backend, results_json=None,
               judge_elsewhere: bool = False) -> list[LmmsTask]:
    """The lmms-eval names of a run as LmmsTasks sharing one runner, every name's data checked now
    (before any model loads); `backend` is made on the first run (`LmmsRunner`). `judge_elsewhere`: an own
    task of the run reads the judge section too."""
    specs = resolve_specs(names, data=opts.data, data_root=ctx.data_root, split=opts.split, limit=ctx.limit)
    judge = resolve_judge(specs, getattr(ctx, "judge", None), ctx.dist.world_size, judge_elsewhere)
    runner = LmmsRunner(backend, batch_size=ctx.batch_size, cache_root=Path(ctx.resume_root) / "lmms"
                        if ctx.resume_root else None, dist=ctx.dist, gen_kwargs=opts.gen_kwargs_arg(),
                        bootstrap_iters=opts.bootstrap_iters, limit=ctx.limit, results_json=results_json, seed=seed)
    runner.judge, runner.judge_root, runner.judge_log_dir = judge, ctx.resume_root, getattr(ctx, "output_dir", None)
    return [LmmsTask(spec, runner, seed=seed, gen_kwargs=opts.gen_kwargs) for spec in specs]


def resolve_judge(specs: list[LmmsSpec], judge_cfg, world_size: int = 1, judge_elsewhere: bool = False):
    """The run's Judge when a leaf is scored by lmms-eval's LLM judge (else None), its identity set on those
    leaves; a judged leaf that would call the network is a UserError now (evalsuite/lmms/judged.py).
    `judge_elsewhere`: an own task of the run reads the judge too."""
    from evalsuite.lmms.judged import HONOURS_JUDGE, check_leaves, judge_identity

    leaves = [lf for spec in specs for lf in spec.leaves]
    if not check_leaves(leaves, judge_cfg, world_size):
        if judge_cfg is not None and judge_cfg.given and not judge_elsewhere:
            log.warning("judge: no task of this run is scored by a judge (%s); the judge: section is not used "
                        "(lmms-eval tasks that are: %s)", ", ".join(s.name for s in specs),
                        ", ".join(sorted(HONOURS_JUDGE)))
        return None
    from evalsuite.judge.judge import Judge

    judge = Judge.resolve(judge_cfg, ", ".join(lf.name for lf in leaves if lf.network))
    if judge_cfg.decoding() != type(judge_cfg)().decoding():
        log.warning("judge.temperature / judge.max_tokens do not apply to lmms-eval's judged tasks (%s): lmms-eval "
                    "sets both per request (docs/lmms-eval.md)", ", ".join(lf.name for lf in leaves if lf.network))
    ident = judge_identity(judge)
    for lf in leaves:
        if lf.network:
            lf.judge = ident
    return judge


def iter_lmms_tasks(names: list, *, ckpt=None, data_root=None, split: str = "val", data: dict | None = None,
                    limit: int | None = None, batch_size: int = 8, gen_kwargs: str | None = None,
                    bootstrap_iters: int = 100, cache_root=None, dist: Dist | None = None,
                    device: str | None = None, backend=None, results_json=None,
                    seed: int = 0) -> Iterator[TaskResult]:
    """Run lmms-eval tasks (names, or specs from `resolve_specs`) on `ckpt` or `backend` (anything with
    generate/loglikelihood/fingerprint/name/device), yielding each name's results as it finishes: the
    runner `evalsuite run` uses, without a run around it (tests, bench/lmms_overhead.py).
    `results_json`: rank 0 also keeps lmms-eval's own results layout of everything run so far there.
    `seed`: lmms-eval's four seeds (`backend.evaluate`), recorded in every result's identity."""
    dist = dist or Dist.current()
    specs = names if all(isinstance(n, LmmsSpec) for n in names) else resolve_specs(
        list(names), data_root=data_root, split=split, data=data, limit=limit)
    if backend is None:
        from evalsuite.models.backend import VLMBackend

        backend = VLMBackend.from_checkpoint(ckpt, device=dist.device(device))
    runner = LmmsRunner(backend, batch_size=batch_size, cache_root=cache_root, dist=dist, gen_kwargs=gen_kwargs,
                        bootstrap_iters=bootstrap_iters, limit=limit, results_json=results_json, seed=seed)
    for spec in specs:
        yield from runner.run(spec)
