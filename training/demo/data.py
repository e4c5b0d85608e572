"""Training data the demo derives from the synthetic world's train split.

* SFT (`vlquery_json`): per image one detailed-description caption, a controlled fraction of which
  mention one object that is NOT in the image (so the base model hallucinates measurably), plus
  yes/no existence questions in lmms-eval's prompt format (so POPE/MME answers are parseable).
* CSR prompts: `{id, image, question}` records with LLaVA's detailed-description instructions.
"""
from __future__ import annotations

import random
from pathlib import Path

from evalsuite.files import write_json_atomic

# lmms-eval's MME/POPE post-prompt (lmms_eval/tasks/{mme,pope}); the model must learn to answer under it.
POST_PROMPT = "\nAnswer the question using a single word or phrase."
CAPTION_TEMPLATE = "positions"
CAPTION_PROMPTS = (
    "Please describe this image in detail.",
    "Describe the following image.",
    "What are the key elements in this picture?",
    "Write a detailed description of the given image.",
)


def _relative(path: str, root: Path) -> str:
    return str(Path(path).resolve().relative_to(root.resolve()))


def sft_records(world: Path, hallucination_rate: float, seed: int, qa_per_image: int = 2,
                hallucination: str = "partner") -> list[dict]:
    """vlquery_json records over the world's train split; image paths relative to the world root.

    `hallucination`: "partner" appends, to a `hallucination_rate` fraction of captions, the absent
    co-occurrence partner of a present object (a habit greedy decoding reproduces, as real VLMs do;
    an image whose objects' partners are all present keeps its clean caption); "random" inserts a
    uniformly drawn absent object at a random place."""
    from evalsuite.world.captions import absent_partner, caption_for, pick_absent
    from evalsuite.world.categories import BY_ID
    from evalsuite.world.pope import pope_question
    from training.demo.judge import scene_table

    rng = random.Random(seed)
    records = []
    for path, objects in scene_table(world, "train"):
        image = _relative(path, world)
        # one detailed template (colour + position of every object): the tiny model can ground it
        absent = None
        if rng.random() < hallucination_rate:
            absent = absent_partner(objects, rng) if hallucination == "partner" else pick_absent(objects, rng)
        caption = caption_for(objects, rng, template=CAPTION_TEMPLATE, absent=absent,
                              absent_last=hallucination == "partner")
        records.append(_conv(image, rng.choice(CAPTION_PROMPTS), caption))
        present = sorted({o.category_id for o in objects})
        for _ in range(qa_per_image):
            yes = rng.random() < 0.5
            cid = rng.choice(present) if yes else pick_absent(objects, rng)
            question = pope_question(BY_ID[cid].name) + POST_PROMPT
            records.append(_conv(image, question, "Yes" if yes else "No"))
    rng.shuffle(records)
    return records


def _conv(image: str, question: str, answer: str) -> dict:
    return {"image": image, "conversations": [{"from": "user", "value": f"<image>\n{question}"},
                                              {"from": "assistant", "value": answer}]}


def csr_prompts(world: Path, n: int, seed: int) -> list[dict]:
    """`n` {id, image, question} records from train images (CSR reuses the same prompts every iteration)."""
    from training.demo.judge import scene_table

    rng = random.Random(seed)
    scenes = scene_table(world, "train")
    picked = sorted(rng.sample(range(len(scenes)), min(n, len(scenes))))
    return [{"id": f"{i:06d}", "image": _relative(scenes[i][0], world), "question": rng.choice(CAPTION_PROMPTS)}
            for i in picked]


def write_demo_data(world: Path, out: Path, hallucination_rate: float, csr_n: int, seed: int,
                    qa_per_image: int = 2, hallucination: str = "partner") -> dict[str, Path]:
    paths = {"sft": out / "sft.json", "prompts": out / "csr_prompts.json"}
    records = sft_records(world, hallucination_rate, seed, qa_per_image, hallucination)
    write_json_atomic(paths["sft"], records, indent=None)
    write_json_atomic(paths["prompts"], csr_prompts(world, csr_n, seed), indent=None)
    return paths
