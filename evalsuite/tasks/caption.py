"""Task `caption`: answer one prompt for every image of a COCO-format split.

Its generations are kept in `ctx.generations[("caption", split, prompt)]` so later tasks of the
same run (relevance) score them instead of generating again.
"""
from __future__ import annotations

from evalsuite.tasks.base import RunContext
from evalsuite.types import GenRequest, MetricValue, TaskResult

DEFAULT_PROMPT = "Please describe this image in detail."


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


def data_fingerprint(data_root, split: str) -> str:
    """sha256 (first 16 hex) over the split's annotation files: the data a result was computed on."""
    import hashlib

    from evalsuite.files import sha256_file
    from evalsuite.world.layout import CocoLayout

    layout = CocoLayout(data_root, split)
    files = [p for p in (layout.instances_json, layout.captions_json) if p.is_file()]
    return hashlib.sha256("".join(sha256_file(p) for p in files).encode()).hexdigest()[:16]


def generate_for_images(ctx: RunContext, task: str, images: list[dict], split: str, prompt: str) -> list[dict]:
    """Generate (or reuse this run's) answers for `images`; records land in ctx.generations."""
    key = (task, split, prompt)
    if key not in ctx.generations:
        requests = [GenRequest(key=str(im["id"]), image=im["path"], prompt=prompt) for im in images]
        answers = ctx.generate(requests)
        sent = ctx.vlm.inputs.prompt(prompt)  # the text the processor received (template, system prompt)
        ctx.generations[key] = [
            {"key": r.key, "image_id": im["id"], "image": im["path"], "prompt": prompt, "prompt_text": sent,
             "answer": a}
            for r, im, a in zip(requests, images, answers)
        ]
    return ctx.generations[key]


class CaptionTask:
    name = "caption"
    version = "1"

    def run(self, ctx: RunContext) -> TaskResult:
        split = ctx.options.get("split", "val")
        prompt = ctx.options.get("prompt", DEFAULT_PROMPT)
        images = coco_images(ctx.data_root, split)[: ctx.limit]
        samples = generate_for_images(ctx, self.name, images, split, prompt)
        lengths = [len(s["answer"].split()) for s in samples]
        metrics = [
            MetricValue("answer_words_mean", sum(lengths) / len(lengths) if lengths else 0.0,
                        higher_is_better=True, n=len(lengths)),
            MetricValue("empty_answer_rate", sum(1 for n in lengths if n == 0) / len(lengths) if lengths else 0.0,
                        higher_is_better=False, n=len(lengths)),
        ]
        return TaskResult(
            task=self.name, version=self.version, metrics=metrics, samples=samples,
            config={"split": split, "prompt": prompt, "limit": ctx.limit, "gen": ctx.gen.to_dict()},
            identity={"data": data_fingerprint(ctx.data_root, split), "split": split, "prompt": prompt,
                      "image_ids": [im["id"] for im in images], "gen": ctx.gen.to_dict()},
        )
