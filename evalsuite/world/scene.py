"""A world image's content: 1-4 glyphs, each in its own cell of a 2x2 grid, sampled from a seeded rng."""
from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from evalsuite.world.categories import BY_ID, CATEGORIES, CELLS
from evalsuite.world.draw import glyph_polygon, polygon_area, polygon_bbox

# More 3-4 object images than 1-2: POPE asks about 3 present categories per image (as in the paper).
N_OBJECTS_WEIGHTS = {1: 0.15, 2: 0.25, 3: 0.3, 4: 0.3}
MIN_HALF, MAX_HALF = 7.0, 12.0   # glyph half-size in px, for a 32 px cell of a 64 px image


@dataclass(frozen=True)
class WorldObject:
    category_id: int
    cell: int                                  # index into CELLS
    polygon: tuple[tuple[float, float], ...] = ()

    @property
    def category(self):
        return BY_ID[self.category_id]

    @property
    def bbox(self) -> list[float]:
        return polygon_bbox(self.polygon)

    @property
    def area(self) -> float:
        return polygon_area(self.polygon)


def sample_scene(rng: random.Random, size: int = 64) -> list[WorldObject]:
    """Objects sorted by cell (reading order), each category drawn uniformly (repeats allowed)."""
    n = rng.choices(list(N_OBJECTS_WEIGHTS), weights=list(N_OBJECTS_WEIGHTS.values()))[0]
    cells = sorted(rng.sample(range(len(CELLS)), n))
    cell_px = size / 2
    objects = []
    for cell in cells:
        cat = rng.choice(CATEGORIES)
        half = rng.uniform(MIN_HALF, MAX_HALF) * size / 64
        x0, y0 = (cell % 2) * cell_px, (cell // 2) * cell_px
        margin = half + 1.0     # keep every glyph strictly inside its cell
        cx = rng.uniform(x0 + margin, x0 + cell_px - margin)
        cy = rng.uniform(y0 + margin, y0 + cell_px - margin)
        objects.append(WorldObject(cat.id, cell, tuple(glyph_polygon(cat.shape, cx, cy, half))))
    return objects


def cell_of_bbox(bbox: Sequence[float], width: float, height: float) -> int:
    """The 2x2 cell holding a bbox's centre: how positions are read back from COCO annotations."""
    cx, cy = bbox[0] + bbox[2] / 2, bbox[1] + bbox[3] / 2
    return int(cx >= width / 2) + 2 * int(cy >= height / 2)


def objects_from_annotations(anns: Iterable[dict], width: float, height: float) -> list[WorldObject]:
    """Rebuild WorldObjects from COCO instance annotations (e.g. to write SFT captions from the json).

    Only world categories have caption words, so any other category is refused."""
    from evalsuite.errors import UserError

    objs = []
    for a in anns:
        if int(a["category_id"]) not in BY_ID:
            raise UserError(f"annotation {a.get('id')}: category_id {a['category_id']} is not a world "
                            f"category (known: {sorted(BY_ID)})")
        seg = a.get("segmentation") or []
        poly = seg[0] if isinstance(seg, list) and seg and isinstance(seg[0], list) else []
        pts = tuple((poly[i], poly[i + 1]) for i in range(0, len(poly) - 1, 2))
        objs.append(WorldObject(int(a["category_id"]), cell_of_bbox(a["bbox"], width, height), pts))
    return sorted(objs, key=lambda o: o.cell)
