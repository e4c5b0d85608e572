"""What every task that asks the model about the images of a COCO-format split shares: the images, the
default question, and the identity of a set of answers (`answer_identity`)."""
from __future__ import annotations

from evalsuite.errors import UserError

DEFAULT_PROMPT = "Please describe this image in detail."


def check_prompt(section: str, prompt: str) -> None:
    if not prompt.strip():
        raise UserError(f"{section}.prompt: must not be empty")


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


def answer_identity(ctx, data: dict, split: str, image_ids: list, prompt: str, gen) -> dict:
    """What makes two sets of answers the same evaluation (besides the checkpoint): the data (annotation
    file hashes), split, the documents answered, the prompt and prompt settings, the decoding, and the
    device type and dtype the model runs in (`ctx`: the run's evalsuite.tasks.base.RunContext)."""
    from evalsuite.identity import gen_identity, inputs_identity

    return {"data": data, "split": split, "prompt": prompt, "image_ids": list(image_ids), "gen": gen_identity(gen),
            "inputs": inputs_identity(ctx.loader.inputs), **ctx.model_setup()}
