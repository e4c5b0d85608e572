"""The small typed records through which models, tasks, the store and the report meet.

Models never see tasks: a task turns its documents into `GenRequest`s, a model wrapper answers them,
and the task turns answers into `MetricValue`s and per-sample records.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class GenRequest:
    """One (image, prompt) to answer. `image` is a path or a PIL image; `key` identifies the doc."""

    key: str
    image: Any
    prompt: str


@dataclass
class MetricValue:
    """One number of one task: what lands as a row of the results store."""

    metric: str
    value: float
    higher_is_better: bool
    n: int | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    stderr: float | None = None
    variant: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def eval_key(task: str, version: str, identity: dict) -> str:
    """The identity of an evaluation: two results are comparable exactly when their keys are equal.

    sha256 (first 16 hex) over canonical JSON of the task name and version and `identity`: everything
    that can change the number other than the checkpoint itself (data fingerprint, split, sampled
    document ids, prompt and system prompt, prompt format, generation settings, variant, options)."""
    from evalsuite.identity import EvalIdentity

    return EvalIdentity(task, str(version), identity).key()


@dataclass
class TaskResult:
    """What a task returns: its metrics, its per-sample records, the config that produced them, and
    `identity`: the subset of that setup which changes the number (see `eval_key`)."""

    task: str
    version: str
    metrics: list[MetricValue]
    samples: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # e.g. lmms_eval_version, nltk resource checksums
    identity: dict = field(default_factory=dict)

    @property
    def eval_key(self) -> str:
        return eval_key(self.task, self.version, self.identity)

    def to_dict(self) -> dict:
        return {
            "task": self.task,
            "version": self.version,
            "eval_key": self.eval_key,
            "identity": self.identity,
            "metrics": [m.to_dict() for m in self.metrics],
            "config": self.config,
            "extra": self.extra,
            "num_samples": len(self.samples),
        }
