"""The world's categories against the CHAIR vocabulary and the official COCO category list.

The CHAIR mapping here is read from the golden data (synonyms.txt, double_words.json and the two
normalisers' outputs in singularize/tokens.tsv), independently of evalsuite's own CHAIR code, so a
caption word passes only if the reference vocabulary maps it back to its own category under BOTH
the pattern (`original`) and WordNet-lemma (`opera`) normalisers.
"""
from __future__ import annotations

import csv
import json
import random
import re
from dataclasses import dataclass

import pytest

from evalsuite.world.captions import TEMPLATES, caption_for, pick_absent
from evalsuite.world.categories import (
    BY_ID,
    CATEGORIES,
    CELLS,
    COCO80,
    COLOURS,
    NUMBER_WORDS,
)
from evalsuite.world.scene import sample_scene

NORMALISERS = ("pattern", "lemma")


@dataclass
class ChairRef:
    vocab: dict[str, str]             # vocabulary item -> COCO category name
    double: dict[str, str]            # two-word merge table
    norm: dict[str, dict[str, str]]   # normaliser -> token -> normalised token

    def categories(self, caption: str, normaliser: str) -> list[str]:
        """CHAIR steps 1-5 on a world caption (plain lower-case words and , . punctuation)."""
        toks = re.findall(r"[a-z]+|[^\sa-z]", caption.lower())
        toks = [self.norm[normaliser].get(t, t) for t in toks]
        merged, i = [], 0
        while i < len(toks):
            pair = " ".join(toks[i:i + 2])
            if i + 1 < len(toks) and pair in self.double:
                merged.append(self.double[pair])
                i += 2
            else:
                merged.append(toks[i])
                i += 1
        if "toilet" in merged:
            merged = [t for t in merged if t != "seat"]
        return [self.vocab[t] for t in merged if t in self.vocab]


@pytest.fixture(scope="session")
def chair_ref(golden_dir) -> ChairRef:
    vocab = {}
    for line in (golden_dir / "chair" / "synonyms.txt").read_text().splitlines():
        items = line.strip().split(", ")
        for item in items:
            vocab[item] = items[0]
    double = json.loads((golden_dir / "chair" / "double_words.json").read_text())["table"]
    norm = {"pattern": {}, "lemma": {}}
    with open(golden_dir / "chair" / "singularize" / "tokens.tsv", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
            norm["pattern"][row["token"]] = row["pattern_singularize"]
            norm["lemma"][row["token"]] = row["wordnet_lemma_n"]
    return ChairRef(vocab, double, norm)


def test_categories_are_official_coco(golden_dir):
    """Ids, names and supercategories equal the official COCO 2014 list (from the golden instances)."""
    official = {c["id"]: (c["name"], c["supercategory"]) for c in
                json.loads((golden_dir / "chair/coco_val2014_80/instances.json").read_text())["categories"]}
    assert {i: (n, s) for i, n, s in COCO80} == official
    for c in CATEGORIES:
        assert official[c.id] == (c.name, c.supercategory)
    assert len(CATEGORIES) == 12


def test_glyphs_distinct():
    assert len({c.shape for c in CATEGORIES}) == len(CATEGORIES)
    assert len({c.colour for c in CATEGORIES}) == len(CATEGORIES)
    assert all(c.colour in COLOURS for c in CATEGORIES)


@pytest.mark.parametrize("normaliser", NORMALISERS)
def test_caption_words_map_back_to_their_category(chair_ref, normaliser):
    """Every singular and plural caption word is a tokens.tsv token (so its normalised form is the
    reference one) and CHAIR maps it to its own category."""
    for c in CATEGORIES:
        for word in (*c.words, c.plural):
            assert word in chair_ref.norm[normaliser], word
            assert chair_ref.categories(word, normaliser) == [c.name], (word, normaliser)


@pytest.mark.parametrize("normaliser", NORMALISERS)
def test_non_object_words_are_not_chair_words(chair_ref, normaliser):
    """Colour, position, number and template words never count as an object."""
    rng = random.Random(0)
    words = set(COLOURS) | {w for cell in CELLS for w in cell.split()} | set(NUMBER_WORDS[1:5])
    for _ in range(200):
        for t in TEMPLATES:
            words |= set(re.findall(r"[a-z]+", caption_for(sample_scene(rng), rng, template=t)))
    object_words = {w for c in CATEGORIES for w in (*c.words, c.plural)}
    for w in sorted(words - object_words):
        assert chair_ref.categories(w, normaliser) == [], w


@pytest.mark.parametrize("normaliser", NORMALISERS)
def test_captions_mention_exactly_the_present_objects(chair_ref, normaliser):
    """Every template mentions every object, so the CHAIR category set of a caption IS the image's
    category set; with `absent`, exactly one extra category appears."""
    rng = random.Random(1)
    for _ in range(300):
        objects = sample_scene(rng)
        present = {BY_ID[o.category_id].name for o in objects}
        for t in TEMPLATES:
            assert set(chair_ref.categories(caption_for(objects, rng, template=t), normaliser)) == present
            absent = pick_absent(objects, rng)
            got = set(chair_ref.categories(caption_for(objects, rng, template=t, absent=absent), normaliser))
            assert got == present | {BY_ID[absent].name}


def test_absent_must_be_absent():
    objects = sample_scene(random.Random(3))
    with pytest.raises(ValueError):
        caption_for(objects, random.Random(0), absent=objects[0].category_id)


def test_partner_pairs_are_symmetric_world_categories():
    from evalsuite.world.categories import PARTNERS

    assert set(PARTNERS) == set(BY_ID)
    assert all(PARTNERS[PARTNERS[c]] == c and PARTNERS[c] != c for c in PARTNERS)


@pytest.mark.parametrize("normaliser", NORMALISERS)
def test_absent_partner_appended_last(chair_ref, normaliser):
    """The partner hallucination: an absent partner of a present object, mentioned as the LAST object,
    in an empty cell when one exists; CHAIR sees exactly one extra category."""
    from evalsuite.world.captions import absent_partner
    from evalsuite.world.categories import PARTNERS

    rng = random.Random(4)
    seen = 0
    for _ in range(300):
        objects = sample_scene(rng)
        present = {o.category_id for o in objects}
        partner = absent_partner(objects, rng)
        if partner is None:
            assert all(PARTNERS[c] in present for c in present)
            continue
        seen += 1
        assert partner not in present and any(PARTNERS[c] == partner for c in present)
        text = caption_for(objects, rng, template="positions", absent=partner, absent_last=True)
        got = set(chair_ref.categories(text, normaliser))
        assert got == {BY_ID[c].name for c in present} | {BY_ID[partner].name}
        last = text.rstrip(".").split(" and ")[-1]
        assert BY_ID[partner].colour in last.split()
        cell = next(c for c in CELLS if last.endswith(c))
        if len(objects) < len(CELLS):
            assert CELLS.index(cell) not in {o.cell for o in objects}
    assert seen > 200
