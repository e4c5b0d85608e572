"""What every evalsuite task sees: a `RunContext`, and what it returns: a `TaskResult`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalsuite.types import GenConfig, GenRequest, TaskResult


@dataclass
class RunContext:
    """Everything a task needs for one `evalsuite run`; the model is loaded on first use."""

    ckpt: str
    data_root: Path                 # a COCO-format folder (images/ + annotations/)
    output_dir: Path
    limit: int | None = None
    batch_size: int = 8
    gen: GenConfig = field(default_factory=GenConfig)
    options: dict[str, Any] = field(default_factory=dict)   # task options: split, prompt, variant, clip, ...
    trust_remote_code: bool = False
    device: str | None = None
    inputs: Any = None              # evalsuite.models.inputs.InputConfig (system prompt, template, image_aspect)
    _vlm: Any = None
    # answers generated in this run, keyed by (split, prompt, gen) so `relevance` reuses `caption`/`chair`
    generations: dict[tuple, list[dict]] = field(default_factory=dict)

    @property
    def vlm(self):
        if self._vlm is None:
            from evalsuite.models.vlm import load_vlm

            self._vlm = load_vlm(self.ckpt, trust_remote_code=self.trust_remote_code, device=self.device,
                                 inputs=self.inputs)
        return self._vlm

    def generate(self, requests: list[GenRequest], gen: GenConfig | None = None) -> list[str]:
        from evalsuite.models.vlm import generate

        return generate(self.vlm, requests, gen or self.gen, batch_size=self.batch_size)


class Task(Protocol):
    name: str
    version: str

    def run(self, ctx: RunContext) -> TaskResult: ...
