"""The CHAIR vocabulary (synonyms -> COCO category) and the two-word merge table, as package data.

Both files are copies of the CHAIR data (Rohrbach et al. 2018, LisaAnne/Hallucination, BSD 2-Clause):
`evalsuite/data/chair_synonyms.txt` is byte-identical to its `data/synonyms.txt`;
`evalsuite/data/chair_double_words.json` writes the pair rules its `utils/chair.py` hard-codes.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class ChairVocab:
    """word -> category, the pair table, and the toilet/seat rule, ready for the scorer."""

    word_to_category: dict[str, str]
    categories: tuple[str, ...]
    pairs: dict[str, str]                       # "tok tok" -> merged token
    pair_firsts: frozenset[str]                 # first words of pair keys: a cheap pre-check
    remove_if_all: tuple[tuple[frozenset[str], str], ...]   # ({toilet, seat}, "seat")


def parse_synonyms(text: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """Each line `strip()`ped and split on ", ": first item is the category, all items map to it.

    The split is on ", " exactly as the reference does, so " motor bike" (two spaces in the file)
    keeps its leading space and can never match a token: that is the reference's behaviour.
    """
    mapping: dict[str, str] = {}
    cats: list[str] = []
    for line in text.splitlines():
        items = line.strip().split(", ")
        if not items or not items[0]:
            continue
        cats.append(items[0])
        for item in items:
            mapping[item] = items[0]
    return mapping, tuple(cats)


def parse_double_words(obj: dict) -> tuple[dict[str, str], tuple[tuple[frozenset[str], str], ...]]:
    pairs = dict(obj["table"])
    rules = tuple(
        (frozenset(r["if_all_present"]), r["remove_all"]) for r in obj.get("post_merge_rules", [])
    )
    return pairs, rules


@functools.lru_cache(maxsize=1)
def load_vocab() -> ChairVocab:
    """The shipped vocabulary (cached: it is immutable)."""
    data = resources.files("evalsuite") / "data"
    mapping, cats = parse_synonyms((data / "chair_synonyms.txt").read_text(encoding="utf-8"))
    pairs, rules = parse_double_words(json.loads((data / "chair_double_words.json").read_text()))
    return ChairVocab(
        word_to_category=mapping,
        categories=cats,
        pairs=pairs,
        pair_firsts=frozenset(k.split(" ", 1)[0] for k in pairs),
        remove_if_all=rules,
    )
