"""What every evalsuite task sees (a frozen `RunContext`), states before it works (a `Plan`) and returns
(a `TaskResult`).

`evalsuite.run.run_eval` runs a task in two steps:

    plan(ctx, opts, sources) -> Plan        model-free: checks the task's options and data, and states its
                                            identity (what makes its numbers comparable: `Plan.eval_key`)
    run(ctx, plan, inputs) -> TaskResult    the work; None on data-parallel ranks other than 0 (an
                                            lmms-eval name, evalsuite/lmms/task.py: a list, [] there)

`opts` is the task's own typed options dataclass (`Task.Options`, a section of the eval config). A task
that consumes another task's answers names it in `requires(opts, tasks)`; it gets that task's Plan in
`plan(..., sources)` and its answer records in `run(..., inputs)`. Nothing in the context changes while
tasks run: rank, world size and device are resolved once by `run_eval`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalsuite.dist import Dist
from evalsuite.errors import UserError
from evalsuite.models.inputs import InputConfig
from evalsuite.types import GenConfig, GenRequest, TaskResult, eval_key


class ModelLoader:
    """Loads the checkpoint on first use, once: a run whose answers are all cached never loads it."""

    def __init__(self, ckpt: str, device: str | None = None, trust_remote_code: bool = False,
                 inputs: InputConfig | None = None, dtype: str | None = None, engine: Any = None, log_dir: Path | None = None):
        self.ckpt, self.device, self.trust_remote_code, self.dtype = ckpt, device, trust_remote_code, dtype
        self.inputs = inputs or InputConfig()
        self._vlm: Any = None
        self._prompts: Any = None
        # engine: None = HF generate in this process; else an evalsuite.engines EngineSpec, whose worker
        # starts on the first generation and stops in close() (run_eval's finally)
        self.engine, self.log_dir = engine, log_dir
        self._generator: Any = None

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

    def generator(self, device_type: str, dtype: str):
        """The engine's generator (evalsuite/engines/vllm_engine.py), its worker started on first use."""
        if self._generator is None:
            from evalsuite.engines.vllm_engine import VllmGenerator, make_engine

            log_path = Path(self.log_dir) / "vllm_worker.log" if self.log_dir else None
            engine = make_engine(self.engine, self.ckpt, dtype=dtype, device=device_type, log_path=log_path)
            self._generator = VllmGenerator(engine, self.prompts(), self.ckpt)
        return self._generator

    def close(self) -> None:
        """Stop the engine worker, if one was started."""
        if self._generator is not None:
            self._generator.engine.close()


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
    engine: Any = None                  # None = HF generate; an evalsuite.engines EngineSpec (docs/engines.md)
    judge: Any = None                   # the run's judge: section (evalsuite/judge/config.py), read by judged tasks
    loader: ModelLoader | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.loader is None:  # a frozen dataclass sets its derived fields through object.__setattr__
            object.__setattr__(self, "loader", ModelLoader(self.ckpt, self.device, self.trust_remote_code, self.inputs,
                                                           self.dtype, engine=self.engine, log_dir=self.output_dir))

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
        return self.engine.identity() if self.engine is not None else {}

    @property
    def vlm(self):
        return self.loader.get()

    def generate(self, requests: list[GenRequest], gen: GenConfig) -> list[str]:
        if self.engine is not None:
            return self.generator().generate(requests, gen)
        from evalsuite.models.vlm import generate

        return generate(self.vlm, requests, gen, batch_size=self.batch_size, progress=False)

    def generator(self):
        from evalsuite.models.vlm import resolve_dtype

        if self.dist.world_size > 1:
            raise UserError("--engine vllm: one process runs the engine; use vllm.data_parallel_size / "
                            "vllm.tensor_parallel_size instead of a multi-process launch (docs/multi-gpu.md)")
        return self.loader.generator(self.device_type, resolve_dtype(self.device_type, self.dtype))

    def backend(self, fingerprint: str):
        """The model behind lmms-eval's adapter: this run's engine, or the loaded HF model."""
        if self.engine is not None:
            from evalsuite.engines.vllm_engine import VllmBackend

            setup = self.model_setup()
            return VllmBackend(self.generator(), fingerprint, self.engine_identity(), setup["dtype"],
                               self.device_type, name=str(self.ckpt))
        from evalsuite.models.backend import VLMBackend

        return VLMBackend(self.vlm, fingerprint, name=str(self.ckpt))


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
    def of(cls, task: Task, opts: Any, identity: dict, resolved: dict | None = None, state: Any = None) -> Plan:
        """A task's plan with its identity and stored config made from the same option fields: identity =
        every option not marked `identity=False` (evalsuite.identity.options_identity) plus `identity` (the
        data, the answers' setup, resolved values: these win); config = every option plus `resolved` (what
        options resolved to, e.g. chair's seed, and run settings such as limit and gen)."""
        from evalsuite.config import to_plain
        from evalsuite.identity import options_identity

        return cls(task.name, task.version, {**options_identity(opts), **identity},
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
