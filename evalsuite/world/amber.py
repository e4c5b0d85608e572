"""The synthetic world's annotations in AMBER's released layout, for amber_g / amber_d (docs/amber.md).

    python -m evalsuite.world.amber --world W --split val --out AMBERDIR [--images N]
    -> AMBERDIR/data/{annotations.json, relation.json, safe_words.txt, metrics.txt}
       AMBERDIR/data/query/{query_generative.json, query_discriminative.json, query_all.json}
       AMBERDIR/image/AMBER_<n>.jpg

Image n (1-based, in image-id order) of the split becomes generative entry n: truth = its categories, hallu =
its absent co-occurrence partners (the world's PARTNERS: the objects a model that learnt the habit names
although absent), then other absent categories, five in all. After all generative entries come the
discriminative ones, per image: existence (a present category: yes; an absent partner: no), state (its
colour: yes; another colour: no) and number (its count: yes; one more: no). The world has no actions or
relations, so amber_d on it has no action or relation rows. relation.json lists each category with its
other caption words (person: man, woman); safe_words.txt is empty; metrics.txt holds the released start
values (0 for scores, 0.001 for counts).
"""
from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path

from evalsuite.world.categories import BY_ID, CATEGORIES, COLOURS, NUMBER_WORDS, PARTNERS, article

PROMPT = "Describe this image."
N_HALLU = 5


def _metrics_txt() -> str:
    from evalsuite.metrics.amber import DISC_KEYS, GEN_KEYS

    return "\n".join(f"{k}={0.001 if k.endswith('_num') else 0}" for k in GEN_KEYS + DISC_KEYS)


def _hallu(present: list[int]) -> list[str]:
    partners = [PARTNERS[c] for c in present if PARTNERS.get(c) not in present]
    others = [c.id for c in CATEGORIES if c.id not in present]
    return [BY_ID[c].name for c in dict.fromkeys(partners + others)][:N_HALLU]


def _questions(counts: Counter, rng_colour: int) -> list[tuple[str, str, str]]:
    """(annotation type, question, truth) of one image."""
    present = list(counts)
    cat = BY_ID[present[0]]
    absent = [PARTNERS[c] for c in present if PARTNERS.get(c) not in counts] or \
        [c.id for c in CATEGORIES if c.id not in counts]
    other = BY_ID[absent[0]]
    colours = [c for c in COLOURS if c != cat.colour]
    wrong = colours[rng_colour % len(colours)]
    n = counts[cat.id]
    many = f"Are there {NUMBER_WORDS[n + 1]} {cat.plural} in this image?"
    exact = f"Is there only one {cat.name} in this image?" if n == 1 else \
        f"Are there {NUMBER_WORDS[n]} {cat.plural} in this image?"
    return [("discriminative-hallucination", f"Is there {article(cat.name)} {cat.name} in this image?", "yes"),
            ("discriminative-hallucination", f"Is there {article(other.name)} {other.name} in this image?", "no"),
            ("discriminative-attribute-state", f"Is the {cat.name} {cat.colour} in this image?", "yes"),
            ("discriminative-attribute-state", f"Is the {cat.name} {wrong} in this image?", "no"),
            ("discriminative-attribute-number", exact, "yes"),
            ("discriminative-attribute-number", many, "no")]


def build_amber(world: str | os.PathLike, out: str | os.PathLike, split: str = "val", images: int | None = None) -> Path:
    """Write the AMBER layout of the first `images` images (all: None) of `split` of the world at `world`."""
    from PIL import Image

    from evalsuite.world.layout import CocoLayout

    layout = CocoLayout(world, split)
    coco = json.loads(layout.instances_json.read_text(encoding="utf-8"))
    counts: dict[int, Counter] = {}
    for a in coco["annotations"]:
        counts.setdefault(a["image_id"], Counter())[a["category_id"]] += 1
    picked = [im for im in sorted(coco["images"], key=lambda im: im["id"]) if counts.get(im["id"])][:images]
    out = Path(out)
    (out / "data" / "query").mkdir(parents=True, exist_ok=True)
    (out / "image").mkdir(parents=True, exist_ok=True)
    anns, gen_q, disc_q = [], [], []
    for n, im in enumerate(picked, 1):
        name = f"AMBER_{n}.jpg"
        with Image.open(layout.image_path(im["file_name"])) as img:
            img.convert("RGB").save(out / "image" / name, quality=95)
        present = list(counts[im["id"]])
        anns.append({"id": n, "type": "generative", "truth": [BY_ID[c].name for c in present],
                     "hallu": _hallu(present)})
        gen_q.append({"id": n, "image": name, "query": PROMPT})
    for n, im in enumerate(picked, 1):
        for kind, question, truth in _questions(counts[im["id"]], im["id"]):
            qid = len(anns) + 1
            anns.append({"id": qid, "type": kind, "truth": truth})
            disc_q.append({"id": qid, "image": f"AMBER_{n}.jpg", "query": question})
    relation = {c.name: [w for w in c.words if w != c.name] for c in CATEGORIES}
    files = {"data/annotations.json": anns, "data/relation.json": relation,
             "data/query/query_generative.json": gen_q, "data/query/query_discriminative.json": disc_q,
             "data/query/query_all.json": gen_q + disc_q}
    for rel, obj in files.items():
        (out / rel).write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    (out / "data" / "safe_words.txt").write_text("", encoding="utf-8")
    (out / "data" / "metrics.txt").write_text(_metrics_txt() + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="the synthetic world's annotations in AMBER's layout")
    ap.add_argument("--world", required=True, help="a world built by `evalsuite world build`")
    ap.add_argument("--out", required=True)
    ap.add_argument("--split", default="val")
    ap.add_argument("--images", type=int, default=None)
    args = ap.parse_args(argv)
    print(build_amber(args.world, args.out, args.split, args.images))


if __name__ == "__main__":
    main()
