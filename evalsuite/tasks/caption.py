"""Task `caption`: answer one prompt for every image of a COCO-format split.

Options (`caption:` section of the eval config): split, prompt. Its answer records are handed to
tasks that require them (relevance), so the model never answers the same request twice in a run.
"""
from __future__ import annotations

from dataclasses import dataclass

from evalsuite.config import opt
from evalsuite.errors import UserError
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.tasks.coco import DEFAULT_PROMPT, answer_identity, check_prompt, coco_images
from evalsuite.tasks.metric_spec import MetricSpec, score
from evalsuite.types import TaskResult


def _words(s: dict) -> tuple:
    return (len(s["answer"].split()), 1)


def _empty(s: dict) -> tuple:
    return (float(not s["answer"].split()), 1)


# answer length describes the answers (no better or worse); an empty answer is a failure
METRICS = (MetricSpec("answer_words_mean", "none", _words), MetricSpec("empty_answer_rate", "down", _empty))


@dataclass
class CaptionOptions:
    split: str = opt("val", "split of the data root (val, val2014, ...)", alias="split")
    prompt: str = opt(DEFAULT_PROMPT, "the question asked about every image", alias="prompt")

    def __post_init__(self) -> None:
        check_prompt("caption", self.prompt)


class CaptionTask:
    name = "caption"
    version = "1"
    Options = CaptionOptions
    metrics = METRICS

    def requires(self, opts: CaptionOptions, tasks: list[str]) -> tuple[str, ...]:
        return ()

    def plan(self, ctx: RunContext, opts: CaptionOptions, sources: dict) -> Plan:
        from evalsuite.identity import digest, file_fingerprint
        from evalsuite.world.layout import CocoLayout

        images = coco_images(ctx.data_root, opts.split)[: ctx.limit]
        if not images:
            raise UserError(f"caption: split {opts.split!r} of {ctx.data_root} has no images")
        data = file_fingerprint([CocoLayout(ctx.data_root, opts.split).instances_json])
        identity = answer_identity(ctx, data, opts.split, [im["id"] for im in images], opts.prompt, ctx.gen)
        return Plan.of(self, opts, identity, {"limit": ctx.limit, "gen": ctx.gen.to_dict()},
                       state={"images": images, "data_id": digest(data)})

    def answers(self, ctx: RunContext, plan: Plan) -> list[dict] | None:
        from evalsuite.tasks.answers import generate_answers

        s = plan.state
        return generate_answers(ctx, s["images"], plan.config["prompt"], ctx.gen, s["data_id"], task=self.name)

    def run(self, ctx: RunContext, plan: Plan, inputs: dict) -> TaskResult | None:
        samples = self.answers(ctx, plan)
        if samples is None:  # a data-parallel rank other than 0: its answers went to rank 0
            return None
        return plan.result(score(samples, METRICS, n_boot=0), samples)
