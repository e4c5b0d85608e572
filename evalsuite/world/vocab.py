"""Every sentence the world can produce or send: the tiny-model kit trains its word-level tokenizer on
`corpus()`, so any word a caption, a question or a prompt can hold must appear here (a test checks
fresh captions and a built world's questions against it)."""
from __future__ import annotations

import random
from functools import lru_cache

from evalsuite.world.categories import (
    CATEGORIES,
    CELLS,
    COCO80,
    COLOURS,
    NUMBER_WORDS,
    article,
)

DEFAULT_PROMPT = "Please describe this image in detail."
# lmms-eval 0.7.3 `mme` / `pope` default post_prompt (appended after a newline).
LMMS_POST_PROMPT = "Answer the question using a single word or phrase."
# The 11 LLaVA "detailed description" instructions the CSR prompt set is made of (quirks kept:
# the stray quote in the first one is in LLaVA's list).
LLAVA_DETAIL_PROMPTS = (
    "What is this photo about'?",
    "Can you describe the main features of this image for me?",
    "What's happening in the scene?",
    "What do you see happening in this image?",
    "What do you think is going on in this snapshot?",
    "Write a detailed description of the given image.",
    "What are the key elements in this picture?",
    "Can you elaborate on the elements of the picture provided?",
    "Analyze the image in a comprehensive and detailed manner.",
    "Explain the visual content of the image in great detail.",
    "Describe the following image.",
)
ANSWERS = ("Yes", "No", "yes", "no")
MAX_COUNT = 5          # a count question's wrong answer reaches 4 + 1


def _caption_sweep() -> list[str]:
    """Each caption word in at least one sentence, by construction (templates put words together
    only in these patterns)."""
    out = []
    for c in CATEGORIES:
        for w in c.words:
            for cell in CELLS:
                out.append(f"{article(c.colour)} {c.colour} {w} in the {cell}.")
                out.append(f"{article(c.colour)} {c.colour} {w} in the {cell} of the image.")
            out.append(f"{article(w)} {w}.")
        for n in range(2, 5):
            out.append(f"{NUMBER_WORDS[n]} {c.plural}.")
    for rel in ("beside", "above", "below"):
        out.append(f"a dog {rel} a car, with a cup and two chairs.")
    out += ["a picture of a dog and a car.", "this image shows a dog, a car and a cup.",
            "a brown dog, a red car and a black cup on a plain background."]
    return out


def _random_captions(n_scenes: int = 400, seed: int = 12345) -> list[str]:
    from evalsuite.world.captions import TEMPLATES, caption_for, pick_absent
    from evalsuite.world.scene import sample_scene

    rng = random.Random(seed)
    out = []
    for _ in range(n_scenes):
        objects = sample_scene(rng)
        absent = pick_absent(objects, rng)
        for t in sorted(TEMPLATES):
            out.append(caption_for(objects, rng, template=t))
            out.append(caption_for(objects, rng, template=t, absent=absent))
    return out


def _question_sweep() -> list[str]:
    from evalsuite.world.pope import pope_question
    from evalsuite.world.questions import (
        color_q,
        count_q,
        existence_q,
        numerical_q,
        position_q,
    )

    out = [existence_q(c.name) for c in CATEGORIES]
    for c in CATEGORIES:
        out += [count_q(c, n) for n in range(1, MAX_COUNT + 1)]
        out += [color_q(col, c) for col in COLOURS]
        out += [position_q(c, cell) for cell in range(len(CELLS))]
    out += [numerical_q(k, m) for k in range(1, 4) for m in range(len(NUMBER_WORDS))]
    out += [pope_question(name) for _, name, _ in COCO80]
    out += [existence_q(name) for _, name, _ in COCO80]
    return out


@lru_cache(maxsize=1)
def _corpus() -> tuple[str, ...]:
    sentences = (_caption_sweep() + _random_captions() + _question_sweep() + list(ANSWERS)
                 + [DEFAULT_PROMPT, LMMS_POST_PROMPT, *LLAVA_DETAIL_PROMPTS])
    return tuple(dict.fromkeys(sentences))      # de-duplicated, order kept (deterministic)


def corpus() -> list[str]:
    """Deterministic list of distinct sentences (captions, MME/POPE questions, answers, prompts)."""
    return list(_corpus())
