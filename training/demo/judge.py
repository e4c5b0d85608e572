"""Train the demo's CLIP judge: a tiny CLIP, contrastively, on the synthetic world with hard negatives.

CSR's visual reward is only as good as its judge. Measured on this world, an untrained tiny CLIP (or
one trained on "added object" negatives only) rewards hallucinated answers about as often as grounded
ones, and CSR then makes CHAIR worse. So every image is contrasted with its own corrupted captions:
an absent object added, one object swapped for another category, one colour swapped.
"""
from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path

log = logging.getLogger(__name__)

NEGATIVE_KINDS = ("add", "shape", "colour")


@dataclass
class JudgeConfig:
    steps: int = 600
    batch_size: int = 32
    lr: float = 2e-3
    seed: int = 0
    eval_images: int = 200


def negatives(objects, rng: random.Random, template: str, positive: str) -> dict[str, str]:
    """One corrupted caption per kind for a world image, in the positive's template where possible."""
    from evalsuite.world.captions import absent_partner, caption_for, pick_absent
    from evalsuite.world.categories import BY_ID, COLOURS

    # "add": half the time the absent co-occurrence partner appended (the SFT data's hallucination habit)
    partner = absent_partner(objects, rng) if rng.random() < 0.5 else None
    absent = partner if partner is not None else pick_absent(objects, rng)
    out = {"add": caption_for(objects, rng, template=template, absent=absent, absent_last=partner is not None)}
    i = rng.randrange(len(objects))
    swapped = list(objects)
    swapped[i] = replace(objects[i], category_id=pick_absent(objects, rng))
    out["shape"] = caption_for(swapped, rng, template=template)
    true_colour = BY_ID[objects[i].category_id].colour
    base = positive if true_colour in positive.split() else caption_for(objects, rng, template="positions")
    others = [c for c in COLOURS if c not in {BY_ID[o.category_id].colour for o in objects}]
    out["colour"] = " ".join(rng.choice(others) if w == true_colour else w for w in base.split())
    return out


def scene_table(world: Path, split: str) -> list[tuple[str, list]]:
    """[(image path, WorldObjects)] of a world split, from its COCO instances json."""
    import json

    from evalsuite.world.layout import CocoLayout
    from evalsuite.world.scene import objects_from_annotations

    layout = CocoLayout(world, split)
    data = json.loads(Path(layout.instances_json).read_text())
    anns: dict[int, list] = {}
    for a in data["annotations"]:
        anns.setdefault(a["image_id"], []).append(a)
    return [
        (str(layout.image_path(im["file_name"])), objects_from_annotations(anns.get(im["id"], []), im["width"], im["height"]))
        for im in sorted(data["images"], key=lambda im: im["id"]) if anns.get(im["id"])
    ]


def _pixels(processor, paths: list[str]):
    from evalsuite.images import open_rgb

    images = [open_rgb(p) for p in paths]
    return processor(images=images, return_tensors="pt")["pixel_values"]


def _batch_loss(model, tok, pixels, pos: list[str], neg: list[list[str]]):
    """Image->text CE over [all positives of the batch + this image's own negatives], plus text->image."""
    import torch
    import torch.nn.functional as F

    B, K = len(pos), len(neg[0])
    texts = pos + [t for row in neg for t in row]
    enc = tok(texts, padding=True, truncation=True, return_tensors="pt")
    t = F.normalize(model.get_text_features(**enc).pooler_output, dim=-1)
    v = F.normalize(model.get_image_features(pixel_values=pixels).pooler_output, dim=-1)
    scale = model.logit_scale.exp()
    t_pos, t_neg = t[:B], t[B:].view(B, K, -1)
    logits = torch.cat([v @ t_pos.T, torch.einsum("bd,bkd->bk", v, t_neg)], dim=1) * scale
    target = torch.arange(B)
    return F.cross_entropy(logits, target) + F.cross_entropy((t_pos @ v.T) * scale, target)


def train_judge(clip_dir: Path, world: Path, out: Path, cfg: JudgeConfig) -> Path:
    """Train the tiny CLIP at `clip_dir` on the world's train split; save to `out` with a manifest."""
    import torch
    from transformers import AutoProcessor, CLIPModel

    from evalsuite.manifest import write_manifest
    from evalsuite.progress import progress_bar
    from evalsuite.world.captions import TEMPLATES, caption_for

    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    model = CLIPModel.from_pretrained(clip_dir, local_files_only=True, use_safetensors=True).train()
    processor = AutoProcessor.from_pretrained(clip_dir, local_files_only=True)
    scenes = scene_table(world, "train")
    pixels = _pixels(processor, [p for p, _ in scenes])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    warmup = max(1, cfg.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(  # linear warm-up, then cosine to 0
        opt, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, cfg.steps - warmup))))
    batch = min(cfg.batch_size, len(scenes))
    for step in progress_bar(range(cfg.steps), desc="clip judge", unit="step"):
        idx = rng.sample(range(len(scenes)), batch)
        pos, neg = [], []
        for i in idx:
            template = rng.choice(sorted(TEMPLATES))
            pos.append(caption_for(scenes[i][1], rng, template=template))
            neg.append(list(negatives(scenes[i][1], rng, template, pos[-1]).values()))
        loss = _batch_loss(model, processor.tokenizer, pixels[idx], pos, neg)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0:
            log.info("judge step %d loss %.3f", step, loss.item())
    model.eval()
    accuracy = judge_accuracy(model, processor, world, cfg)
    log.info("judge P(true caption > corrupted) on val: %s", accuracy)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    write_manifest(out, iteration=None, parent=str(clip_dir), method="clip-judge",
                   config={**cfg.__dict__, "world": str(world)}, extra={"val_accuracy": accuracy})
    return out


def judge_accuracy(model, processor, world: Path, cfg: JudgeConfig) -> dict[str, float]:
    """Per negative kind, how often the judge scores the true caption above the corrupted one (val)."""
    import torch

    from evalsuite.world.captions import caption_for

    rng = random.Random(cfg.seed + 1)
    scenes = scene_table(world, "val")[: cfg.eval_images]
    wins = {k: 0 for k in NEGATIVE_KINDS}
    with torch.no_grad():
        pixels = _pixels(processor, [p for p, _ in scenes])
        v = torch.nn.functional.normalize(model.get_image_features(pixel_values=pixels).pooler_output, dim=-1)
        for j, (_, objects) in enumerate(scenes):
            positive = caption_for(objects, rng, template="positions")
            texts = [positive] + list(negatives(objects, rng, "positions", positive).values())
            enc = processor.tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
            t = torch.nn.functional.normalize(model.get_text_features(**enc).pooler_output, dim=-1)
            s = (t @ v[j]).tolist()
            for k, kind in enumerate(NEGATIVE_KINDS, start=1):
                wins[kind] += s[0] > s[k]
    return {k: wins[k] / max(len(scenes), 1) for k in NEGATIVE_KINDS}
