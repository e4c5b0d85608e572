"""The evaluation workflow behind `evalsuite run`: setup -> run each task -> save -> store.

    evalsuite run --ckpt runs/demo/iter_1/model --tasks chair,pope,mme,relevance --clip CLIP_DIR

Each finished task is written to the output directory and the results store before the next one
starts, so a failure late in a run keeps everything finished before it.
"""
from __future__ import annotations

import datetime as _dt
import logging
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evalsuite.errors import RunFailure, UserError
from evalsuite.files import ensure_writable_dir, write_json_atomic, write_jsonl_atomic
from evalsuite.tasks.base import RunContext
from evalsuite.types import GenConfig, TaskResult

log = logging.getLogger(__name__)

# tasks that consume other tasks' generations run after them
RUN_LAST = ("relevance",)
BUILTIN_WORLD_IMAGES = 600


@dataclass
class EvalSpec:
    """Resolved configuration of one evaluation run (saved as run.json beside its outputs)."""

    ckpt: str
    tasks: list[str]
    data_root: str | None = None
    output_dir: str | None = None
    store: str = "results"
    limit: int | None = None
    batch_size: int = 8
    gen: GenConfig = field(default_factory=GenConfig)
    options: dict[str, Any] = field(default_factory=dict)
    trust_remote_code: bool = False
    device: str | None = None
    label: str | None = None
    system_prompt: str | None = None          # evalsuite.models.inputs.InputConfig fields
    chat_template: str | None = None          # a Jinja file replacing the checkpoint's template
    image_aspect: str = "crop"                # crop (the processor's own) | pad (LLaVA-1.5's pad-to-square)

    def input_config(self):
        from evalsuite.models.inputs import InputConfig

        return InputConfig(system_prompt=self.system_prompt, chat_template=self.chat_template,
                           image_aspect=self.image_aspect)


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
    """(evalsuite's own tasks in run order, lmms-eval task names)."""
    from evalsuite.tasks.registry import is_own_task

    own = [n for n in names if is_own_task(n)]
    own.sort(key=lambda n: n in RUN_LAST)
    return own, [n for n in names if not is_own_task(n)]


def check_task_names(names: list[str]) -> None:
    from evalsuite.tasks.registry import LMMS_LOCAL_TASKS, TASKS

    if not names:
        raise UserError("--tasks: no task given")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UserError(f"--tasks: task listed twice: {', '.join(dup)}")
    _, lmms = split_tasks(names)
    if lmms:
        from evalsuite.tasks.lmms import validate_task_names

        validate_task_names(lmms, known_own=list(TASKS) + list(LMMS_LOCAL_TASKS))


def run_meta(spec: EvalSpec, run_id: str) -> dict:
    from evalsuite.manifest import checkpoint_hash, read_manifest, resolve_parent
    from evalsuite.version import code_version, lmms_eval_version

    manifest = read_manifest(spec.ckpt) or {}
    return {
        "run_id": run_id,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ckpt": str(Path(spec.ckpt).resolve()),
        "ckpt_hash": checkpoint_hash(spec.ckpt),
        "iteration": manifest.get("iteration"),
        "method": manifest.get("method"),
        "parent": resolve_parent(manifest.get("parent")),
        "label": spec.label,
        "config": asdict(spec),
        "code_version": code_version(),
        "lmms_eval_version": lmms_eval_version(),
    }


def save_task(out: Path, result: TaskResult) -> None:
    write_jsonl_atomic(out / result.task / "samples.jsonl", result.samples)
    write_json_atomic(out / result.task / "result.json", result.to_dict())


def shared_run_id() -> str:
    """A new run id; under torch.distributed every rank gets rank 0's (one output dir, one store run)."""
    run_id = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    import sys

    if "torch" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            box = [run_id]
            dist.broadcast_object_list(box, src=0)
            run_id = box[0]
    return run_id


def run_eval(spec: EvalSpec) -> dict:
    """Run every task of `spec` on its checkpoint; return the summary {task: result dict}."""
    from evalsuite.models.vlm import _check_dir
    from evalsuite.store import Store

    _check_dir(Path(spec.ckpt))          # fail on a bad checkpoint before any work
    check_task_names(spec.tasks)
    inputs = spec.input_config()         # a bad image_aspect or unreadable template file fails here too
    inputs.template_text()
    # a bad --store/--output must fail now, not after hours of generation
    ensure_writable_dir(spec.store, "--store", create=False)
    if spec.output_dir:
        ensure_writable_dir(spec.output_dir, "--output", create=False)
    data_root = Path(spec.data_root) if spec.data_root else ensure_builtin_world()
    if not data_root.is_dir():
        raise UserError(f"--data-root {data_root}: not a directory")
    run_id = shared_run_id()
    out = Path(spec.output_dir) if spec.output_dir else Path(spec.store) / "runs" / run_id
    meta = run_meta(spec, run_id)
    meta["config"]["data_root"] = meta["data_root"] = str(data_root)
    meta["inputs"] = inputs.to_dict()  # completed with the prompt format once the model is loaded
    from evalsuite.tasks.lmms import is_main_process

    main_rank = is_main_process()
    if main_rank:
        write_json_atomic(out / "run.json", meta)
    # the response cache lives in the store, so a rerun with a new output dir still resumes
    options = {"resume_dir": str(Path(spec.store) / ".resume" / "lmms"), **spec.options}
    ctx = RunContext(ckpt=spec.ckpt, data_root=data_root, output_dir=out, limit=spec.limit,
                     batch_size=spec.batch_size, gen=spec.gen, options=options,
                     trust_remote_code=spec.trust_remote_code, device=spec.device, inputs=inputs)
    store = Store(spec.store)
    summary: dict[str, dict] = {}
    own, lmms = split_tasks(spec.tasks)
    if lmms:  # fail on missing local data before any generation
        from evalsuite.tasks.lmms import resolve_specs

        resolve_specs(ctx, lmms)

    def finish(result: TaskResult) -> None:
        if not main_rank:  # under torchrun/accelerate only rank 0 writes
            return
        try:
            if ctx._vlm is not None and "prompt_format" not in meta["inputs"]:
                meta["inputs"] = ctx.vlm.inputs.describe()  # the prompt actually sent, around {question}
                write_json_atomic(out / "run.json", meta)
            if inputs.identity():  # answers under another system prompt/template/image_aspect compare apart
                result.identity = {**result.identity, "inputs": inputs.identity()}
            save_task(out, result)
            # one store run per task, so each lands as soon as it finishes; eval_run groups them
            store.write_run({**meta, "run_id": f"{run_id}-{result.task}", "eval_run": run_id}, [result])
            summary[result.task] = result.to_dict()
            write_json_atomic(out / "summary.json", summary)
        except OSError as e:  # e.g. the disk filled or went read-only mid-run; writes are atomic
            raise RunFailure(f"{result.task}: cannot write its results ({e.strerror or e}: {e.filename}); "
                             f"tasks finished before it are kept in {out} and {spec.store}") from None
        log.info("%s: %s", result.task, ", ".join(f"{m.metric}={m.value:.4g}" for m in result.metrics))

    from evalsuite.tasks.registry import load_task

    for name in own:
        finish(load_task(name).run(ctx))
    if lmms:
        from evalsuite.tasks.lmms import run_lmms_tasks

        for result in run_lmms_tasks(ctx, lmms):
            finish(result)
    log.info("run %s -> %s (store %s)", run_id, out, spec.store)
    return {"run_id": run_id, "output_dir": str(out), "tasks": summary}
