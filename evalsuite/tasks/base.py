"""What every evalsuite task sees (a frozen `RunContext`), states before it works (a `Plan`) and returns
(a `TaskResult`).

`evalsuite.run.run_eval` runs a task in two steps:

    plan(ctx, opts, sources) -> Plan        model-free: checks the task's options and data, and states its
                                            identity (what makes its numbers comparable: `Plan.eval_key`)
    run(ctx, plan, inputs) -> TaskResult    the work; None on data-parallel ranks other than 0 (an
                                            lmms-eval name, evalsuite/lmms/task.py: a list, [] there)

`opts` is the task's own typed options dataclass (`Task.Options`, a section of the eval config), its fields
declared `required` already given (evalsuite/tasks/registry.py `check_required`, before any plan). A task
that consumes another task's answers names it in `requires(opts, tasks)`; it gets that task's Plan in
`plan(..., sources)` and its answer records in `run(..., inputs)`. Nothing in the context changes while
tasks run: rank, world size and device are resolved once by `run_eval`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalsuite.dist import Dist
from evalsuite.gen_settings import GenConfig
from evalsuite.models.inputs import InputConfig
from evalsuite.types import GenRequest, TaskResult, eval_key


class ModelLoader:
    """Loads the checkpoint on first use, once: a run whose answers are all cached never loads it."""

    def __init__(self, ckpt: str, device: str | None = None, trust_remote_code: bool = False,
                 inputs: InputConfig | None = None, dtype: str | None = None):
        self.ckpt, self.device, self.trust_remote_code, self.dtype = ckpt, device, trust_remote_code, dtype
        self.inputs = inputs or InputConfig()
        self._vlm: Any = None
        self._prompts: Any = None

    @property
    def loaded(self) -> bool:
        return self._vlm is not None

    def get(self):
        if self._vlm is None:
            from evalsuite.models.vlm import load_vlm

            self._vlm = load_vlm(self.ckpt, trust_remote_code=self.trust_remote_code, device=self.device,
                                 dtype=self.dtype, inputs=self.inputs)
        return self._vlm

    def prompts(self):
        """The prompt renderer (`evalsuite.models.inputs.ModelInputs`): the loaded model's, else the
        processor's alone, so answers taken from the cache still record the prompt they were given."""
        if self._vlm is not None:
            return self._vlm.inputs
        if self._prompts is None:
            from evalsuite.models.vlm import load_inputs

            self._prompts = load_inputs(self.ckpt, self.inputs, self.trust_remote_code)
        return self._prompts


@dataclass(frozen=True)
class RunContext:
    """Everything a task needs for one `evalsuite run`, fixed for the whole run."""

    ckpt: str
    data_root: Path | None              # a COCO-format folder (images/ + annotations/)
    output_dir: Path | None = None
    dist: Dist = field(default_factory=Dist)
    device: str | None = None           # resolved by run_eval (None = the loader's choice)
    dtype: str | None = None            # torch dtype name (None = bfloat16 on cuda, float32 elsewhere)
    limit: int | None = None
    batch_size: int = 8
    gen: GenConfig = field(default_factory=GenConfig)   # own tasks' decoding (chair may cap max_new_tokens)
    trust_remote_code: bool = False
    inputs: InputConfig = field(default_factory=InputConfig)   # the run's `inputs:` section, as is
    resume_root: Path | None = None     # per-sample answer cache root (STORE/.resume); None = no resume
    ckpt_id: str = ""                   # ModelId.key() (evalsuite/identity.py): what the model's answers depend on
    # what answers (evalsuite/engines/base.py Engine; run_eval's make_engine): None = HF generate on `loader`
    engine: Any = field(default=None, compare=False, repr=False)
    judge: Any = None                   # the run's judge: section (evalsuite/judge/config.py), read by judged tasks
    loader: ModelLoader | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # a frozen dataclass sets its derived fields through object.__setattr__
        if self.loader is None:
            object.__setattr__(self, "loader", ModelLoader(self.ckpt, self.device, self.trust_remote_code, self.inputs,
                                                           self.dtype))
        if self.engine is None:
            from evalsuite.engines.base import HFEngine

            object.__setattr__(self, "engine", HFEngine(self.loader, self.batch_size))

    @property
    def device_type(self) -> str:
        """cpu / cuda / mps: where the answers are computed (not which GPU: every GPU answers alike)."""
        if self.device:
            return self.device.split(":")[0]
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def model_setup(self) -> dict:
        """{"device": device type, "dtype": the dtype the model runs in}: both change answers, so both are
        part of every result's identity (own tasks and lmms-eval's)."""
        from evalsuite.models.vlm import resolve_dtype

        setup = {"device": self.device_type, "dtype": resolve_dtype(self.device_type, self.dtype)}
        return {**setup, **self.engine_identity()}

    def engine_identity(self) -> dict:
        """{} for HF generate (keys written before engines existed stay valid), else {"engine": {...}}."""
        return self.engine.identity()

    @property
    def vlm(self):
        return self.loader.get()

    def generate(self, requests: list[GenRequest], gen: GenConfig) -> list[str]:
        return self.engine.generate(requests, gen)

    def backend(self, fingerprint):
        """The model behind lmms-eval's adapter: this run's engine."""
        return self.engine.backend(fingerprint, str(self.ckpt))


@dataclass(frozen=True)
class Plan:
    """What a task will compute, known before any model loads."""

    task: str
    version: str
    identity: dict                      # -> eval_key (evalsuite/types.py)
    config: dict                        # resolved options, saved in the result
    state: Any = field(default=None, compare=False, repr=False)   # task-private: images, scorer, GT
    # {result name: eval_key} of every result `run` stores; None = the one result `task` (eval_key). An
    # lmms-eval group has one per leaf (None where known only once it ran; its aggregate goes with them).
    outputs: dict[str, str | None] | None = None
    specs: tuple = field(default=(), compare=False, repr=False)   # the task's MetricSpecs (Plan.of)

    @classmethod
    def of(cls, task: Task, opts: Any, identity: dict, resolved: dict | None = None, state: Any = None,
           reads: tuple[str, ...] | None = None) -> Plan:
        """A task's plan with its identity and stored config made from the same option fields: identity =
        every option not marked `identity=False` (evalsuite.identity.options_identity) plus `identity` (the
        data, the answers' setup, resolved values: these win); config = every option plus `resolved` (what
        options resolved to, e.g. chair's seed, and run settings such as limit and gen). `reads`: in a
        section several tasks share (amber), the option fields this task reads (the others are no part of
        its identity)."""
        from evalsuite.config import to_plain
        from evalsuite.identity import options_identity

        own = {k: v for k, v in options_identity(opts).items() if reads is None or k in reads}
        return cls(task.name, task.version, {**own, **identity},
                   {**to_plain(opts), **(resolved or {})}, state=state, specs=tuple(getattr(task, "metrics", ())))

    def result(self, metrics: list, samples: list[dict], extra: dict | None = None,
               config: dict | None = None) -> TaskResult:
        """The TaskResult of this plan: its identity and config (`config` replaces it), `extra` plus the
        metric specs the table and report read."""
        from evalsuite.tasks.metric_spec import specs_extra

        return TaskResult(task=self.task, version=self.version, metrics=metrics, samples=samples,
                          config=self.config if config is None else config, identity=self.identity,
                          extra={**(extra or {}), "metric_specs": specs_extra(self.specs)})

    @property
    def eval_key(self) -> str:
        return eval_key(self.task, self.version, self.identity)

    def result_keys(self) -> dict[str, str | None]:
        return dict(self.outputs) if self.outputs is not None else {self.task: self.eval_key}


class Task(Protocol):
    """An own task (evalsuite/tasks/registry.py): its file plus one registry line. Optional: `density`, a
    per-sample field whose distribution per checkpoint the report draws (relevance's score)."""

    name: str
    version: str
    Options: type       # its section of the eval config; every field is identity unless identity=False
    metrics: tuple      # its MetricSpecs (evalsuite/tasks/metric_spec.py): stored values, table, report

    def requires(self, opts: Any, tasks: list[str]) -> tuple[str, ...]:
        """The tasks whose answers it reads (run first, their sections read too)."""

    def plan(self, ctx: RunContext, opts: Any, sources: dict[str, Plan]) -> Plan: ...

    def answers(self, ctx: RunContext, plan: Plan) -> list[dict] | None:
        """The answer records a task that requires this one receives (None on ranks other than 0)."""

    def run(self, ctx: RunContext, plan: Plan, inputs: dict[str, list[dict]]) -> TaskResult | list[TaskResult] | None: ...
