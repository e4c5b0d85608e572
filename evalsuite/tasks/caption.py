"""Task `caption`: answer one prompt for every image of a COCO-format split.

Options (`caption:` section of the eval config): split, prompt. Its answer records are handed to
tasks that require them (relevance), so the model never answers the same request twice in a run.
"""
from __future__ import annotations

from dataclasses import dataclass

from evalsuite.config import opt
from evalsuite.errors import UserError
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.tasks.metric_spec import MetricSpec, score, specs_extra
from evalsuite.types import TaskResult

DEFAULT_PROMPT = "Please describe this image in detail."


def _words(s: dict) -> tuple:
    return (len(s["answer"].split()), 1)


def _empty(s: dict) -> tuple:
    return (float(not s["answer"].split()), 1)


# answer length describes the answers (no better or worse); an empty answer is a failure
METRICS = (MetricSpec("answer_words_mean", "none", _words), MetricSpec("empty_answer_rate", "down", _empty))


def check_prompt(section: str, prompt: str) -> None:
    if not prompt.strip():
        raise UserError(f"{section}.prompt: must not be empty")


@dataclass
class CaptionOptions:
    split: str = opt("val", "split of the data root (val, val2014, ...)")
    prompt: str = opt(DEFAULT_PROMPT, "the question asked about every image")

    def __post_init__(self) -> None:
        check_prompt("caption", self.prompt)


def coco_images(data_root, split: str) -> list[dict]:
    """Image records {id, file_name, path} of a split, sorted by id (pycocotools)."""
    import contextlib
    import io

    from pycocotools.coco import COCO

    from evalsuite.world.layout import CocoLayout

    layout = CocoLayout(data_root, split)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress to stdout
        coco = COCO(str(layout.instances_json))
    return [
        {"id": img["id"], "file_name": img["file_name"], "path": str(layout.image_path(img["file_name"]))}
        for img in sorted(coco.dataset["images"], key=lambda im: im["id"])
    ]


def answer_identity(ctx: RunContext, data: dict, split: str, image_ids: list, prompt: str, gen) -> dict:
    """What makes two sets of answers the same evaluation (besides the checkpoint): the data (annotation
    file hashes), split, the documents answered, the prompt and prompt settings, the decoding, and the
    device type and dtype the model runs in."""
    from evalsuite.identity import gen_identity, inputs_identity

    return {"data": data, "split": split, "prompt": prompt, "image_ids": list(image_ids), "gen": gen_identity(gen),
            "inputs": inputs_identity(ctx.loader.inputs), **ctx.model_setup()}


class CaptionTask:
    name = "caption"
    version = "1"
    Options = CaptionOptions

    def requires(self, opts: CaptionOptions, tasks: list[str]) -> tuple[str, ...]:
        return ()

    def plan(self, ctx: RunContext, opts: CaptionOptions, sources: dict) -> Plan:
        from evalsuite.identity import digest, file_fingerprint
        from evalsuite.world.layout import CocoLayout

        images = coco_images(ctx.data_root, opts.split)[: ctx.limit]
        if not images:
            raise UserError(f"caption: split {opts.split!r} of {ctx.data_root} has no images")
        data = file_fingerprint([CocoLayout(ctx.data_root, opts.split).instances_json])
        from evalsuite.identity import options_identity

        identity = {**answer_identity(ctx, data, opts.split, [im["id"] for im in images], opts.prompt, ctx.gen),
                    **options_identity(opts)}
        config = {"split": opts.split, "prompt": opts.prompt, "limit": ctx.limit, "gen": ctx.gen.to_dict()}
        return Plan(self.name, self.version, identity, config, state={"images": images, "data_id": digest(data)})

    def answers(self, ctx: RunContext, plan: Plan) -> list[dict] | None:
        from evalsuite.tasks.answers import generate_answers

        s = plan.state
        return generate_answers(ctx, s["images"], plan.config["prompt"], ctx.gen, s["data_id"], task=self.name)

    def run(self, ctx: RunContext, plan: Plan, inputs: dict) -> TaskResult | None:
        samples = self.answers(ctx, plan)
        if samples is None:  # a data-parallel rank other than 0: its answers went to rank 0
            return None
        metrics = score(samples, METRICS, n_boot=0)
        return TaskResult(task=self.name, version=self.version, metrics=metrics, samples=samples,
                          config=plan.config, identity=plan.identity,
                          extra={"metric_specs": specs_extra(METRICS)})
