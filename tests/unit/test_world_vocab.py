"""The tokenizer corpus covers every word the world and its tasks can send (tokenised as the kit's
word-level tokenizer does: lower-case, then `\\w+|[^\\w\\s]+`, the `Whitespace` pre-tokenizer)."""
from __future__ import annotations

import json
import random
import re

from evalsuite.world.captions import TEMPLATES, caption_for, pick_absent
from evalsuite.world.scene import sample_scene
from evalsuite.world.vocab import (
    DEFAULT_PROMPT,
    LLAVA_DETAIL_PROMPTS,
    LMMS_POST_PROMPT,
    corpus,
)


def _words(texts) -> set[str]:
    return {w for t in texts for w in re.findall(r"\w+|[^\w\s]+", t.lower())}


def test_corpus_deterministic_and_has_prompts():
    c = corpus()
    assert c == corpus() and len(c) == len(set(c))
    assert {DEFAULT_PROMPT, LMMS_POST_PROMPT, "Yes", "No"} <= set(c)
    assert len(LLAVA_DETAIL_PROMPTS) == 11 and set(LLAVA_DETAIL_PROMPTS) <= set(c)


def test_corpus_covers_fresh_captions():
    """Captions from a seed the corpus never used, hallucinated ones included."""
    vocab, rng = _words(corpus()), random.Random(987)
    texts = []
    for _ in range(1000):
        objects = sample_scene(rng)
        for t in TEMPLATES:
            texts += [caption_for(objects, rng, template=t),
                      caption_for(objects, rng, template=t, absent=pick_absent(objects, rng))]
    assert _words(texts) <= vocab


def test_corpus_covers_built_world(world_dir):
    """Reference captions, MME and POPE questions of a built world."""
    import pyarrow.parquet as pq

    vocab = _words(corpus())
    texts = []
    for split in ("train", "val"):
        caps = json.loads((world_dir / "annotations" / f"captions_{split}.json").read_text())
        texts += [a["caption"] for a in caps["annotations"]]
        texts += pq.read_table(world_dir / "questions" / f"mme_{split}.parquet", columns=["question"]).column(0).to_pylist()
        for p in (world_dir / "questions").glob(f"pope_{split}_*.json"):
            texts += [r["question"] for r in json.loads(p.read_text())]
    assert len(texts) > 500
    assert _words(texts) <= vocab
