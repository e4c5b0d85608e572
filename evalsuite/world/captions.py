"""Caption templates for world images. Every object word is a CHAIR synonym of its category
(see categories.py), so CHAIR scores a caption exactly by which categories it mentions."""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from evalsuite.world.categories import (
    BY_ID,
    CATEGORIES,
    CELLS,
    NUMBER_WORDS,
    PARTNERS,
    Category,
    article,
)

Mention = tuple[Category, int]       # (category, cell)


def _join(parts: Sequence[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _noun(cat: Category, rng: random.Random | None) -> str:
    return rng.choice(cat.words) if rng is not None else cat.words[0]


def _np(cat: Category, rng: random.Random | None, colour: bool) -> str:
    """'a puppy', or with colour 'a brown puppy'."""
    words = ([cat.colour] if colour else []) + [_noun(cat, rng)]
    return f"{article(words[0])} {' '.join(words)}"


def _counted(mentions: Sequence[Mention], rng: random.Random | None) -> list[str]:
    """Group by category in first-seen order: 'two dogs', 'a kitten'."""
    counts: dict[int, int] = {}
    for cat, _ in mentions:
        counts[cat.id] = counts.get(cat.id, 0) + 1
    out = []
    for cid, n in counts.items():
        cat = BY_ID[cid]
        out.append(_np(cat, rng, False) if n == 1 else f"{NUMBER_WORDS[n]} {cat.plural}")
    return out


def _placed(mentions: Sequence[Mention], rng: random.Random | None) -> list[str]:
    return [f"{_np(cat, rng, True)} in the {CELLS[cell]}" for cat, cell in mentions]


def _relation(a: int, b: int) -> str:
    """How cell a stands to cell b, read off the 2x2 grid (rows first: 'above' also covers diagonals)."""
    ra, rb = a // 2, b // 2
    if ra == rb:
        return "beside"
    return "above" if ra < rb else "below"


def t_list(m: Sequence[Mention], rng) -> str:
    return f"{_join(_counted(m, rng))}."


def t_picture(m: Sequence[Mention], rng) -> str:
    return f"a picture of {_join(_counted(m, rng))}."


def t_shows(m: Sequence[Mention], rng) -> str:
    return f"this image shows {_join(_counted(m, rng))}."


def t_positions(m: Sequence[Mention], rng) -> str:
    return f"{_join(_placed(m, rng))}."


def t_colours(m: Sequence[Mention], rng) -> str:
    return f"{_join([_np(cat, rng, True) for cat, _ in m])} on a plain background."


def t_relation(m: Sequence[Mention], rng) -> str:
    if len(m) == 1:
        return f"{_np(m[0][0], rng, True)} in the {CELLS[m[0][1]]} of the image."
    (ca, a), (cb, b) = m[0], m[1]
    text = f"{_np(ca, rng, False)} {_relation(a, b)} {_np(cb, rng, False)}"
    if len(m) > 2:
        text += f", with {_join(_counted(m[2:], rng))}"
    return text + "."


TEMPLATES: dict[str, Callable[[Sequence[Mention], random.Random | None], str]] = {
    "list": t_list, "picture": t_picture, "shows": t_shows, "positions": t_positions,
    "colours": t_colours, "relation": t_relation,
}


def _mentions(objects, absent: int | None, rng: random.Random | None, absent_last: bool = False) -> list[Mention]:
    m = [(BY_ID[o.category_id], o.cell) for o in objects]
    if absent is not None:
        if absent in {o.category_id for o in objects}:
            raise ValueError(f"category {absent} is present, it cannot be the absent mention")
        r = rng or random.Random(0)
        if absent_last:   # appended, in an empty cell when there is one (where LURE finds hallucinations)
            occupied = {o.cell for o in objects}
            empty = [c for c in range(len(CELLS)) if c not in occupied]
            m.append((BY_ID[absent], r.choice(empty) if empty else r.randrange(len(CELLS))))
        else:
            m.insert(r.randrange(len(m) + 1), (BY_ID[absent], r.randrange(len(CELLS))))
    return m


def caption_for(objects, rng: random.Random | None = None, template: str | None = None,
                absent: int | None = None, absent_last: bool = False) -> str:
    """One caption of `objects` (WorldObjects). rng picks the template and synonyms (None: the first
    of each). `absent`: a world category id NOT in the image, mentioned anyway: a hallucinated caption
    for training data with a controlled hallucination rate; inserted at a random place, or with
    `absent_last` appended as the last mention."""
    name = template or (rng.choice(sorted(TEMPLATES)) if rng is not None else "positions")
    return TEMPLATES[name](_mentions(objects, absent, rng, absent_last), rng)


def reference_captions(objects, rng: random.Random, n: int = 5) -> list[str]:
    """`n` captions from `n` distinct templates (COCO has 5 references per image)."""
    names = rng.sample(sorted(TEMPLATES), n)
    return [caption_for(objects, rng, template=t) for t in names]


def describe(objects) -> str:
    """The canonical detailed description (no randomness): first synonym, colour and position."""
    return caption_for(objects, None, template="positions")


def pick_absent(objects, rng: random.Random) -> int:
    """A world category id absent from `objects`, uniformly."""
    present = {o.category_id for o in objects}
    return rng.choice([c.id for c in CATEGORIES if c.id not in present])


def absent_partner(objects, rng: random.Random) -> int | None:
    """The co-occurrence partner (categories.PARTNERS) of a present object that is itself absent, or None:
    the object a model that learned co-occurrence statistics adds without seeing it."""
    present = {o.category_id for o in objects}
    partners = sorted({PARTNERS[c] for c in present} - present)
    return rng.choice(partners) if partners else None

