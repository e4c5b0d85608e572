"""Glyph geometry and rendering. Each glyph is ONE polygon: it is what gets filled on the image and
what goes into the COCO `segmentation`, so the mask, bbox and area agree with the pixels exactly."""
from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence

Point = tuple[float, float]


def _regular(n: int, phase: float) -> list[Point]:
    return [(math.cos(phase + 2 * math.pi * k / n), math.sin(phase + 2 * math.pi * k / n))
            for k in range(n)]


def _star() -> list[Point]:
    pts = []
    for k in range(10):
        r = 1.0 if k % 2 == 0 else 0.45
        a = -math.pi / 2 + math.pi * k / 5
        pts.append((r * math.cos(a), r * math.sin(a)))
    return pts


def _rect(w: float, h: float) -> list[Point]:
    return [(-w, -h), (w, -h), (w, h), (-w, h)]


def _plus(t: float) -> list[Point]:
    return [(-t, -1), (t, -1), (t, -t), (1, -t), (1, t), (t, t), (t, 1), (-t, 1), (-t, t),
            (-1, t), (-1, -t), (-t, -t)]


def _rotate(pts: list[Point], angle: float) -> list[Point]:
    c, s = math.cos(angle), math.sin(angle)
    return [(x * c - y * s, x * s + y * c) for x, y in pts]


def _t_shape() -> list[Point]:
    return [(-1, -1), (1, -1), (1, -0.4), (0.3, -0.4), (0.3, 1), (-0.3, 1), (-0.3, -0.4), (-1, -0.4)]


# Unit shapes inside [-1, 1]^2 (y grows downwards, as in image coordinates).
SHAPES: dict[str, Callable[[], list[Point]]] = {
    "circle": lambda: _regular(16, 0.0),
    "square": lambda: _rect(0.85, 0.85),
    "triangle": lambda: [(0.0, -1.0), (1.0, 0.9), (-1.0, 0.9)],
    "down_triangle": lambda: [(-1.0, -0.9), (1.0, -0.9), (0.0, 1.0)],
    "diamond": lambda: [(0.0, -1.0), (1.0, 0.0), (0.0, 1.0), (-1.0, 0.0)],
    "hexagon": lambda: _regular(6, 0.0),
    "star": _star,
    "plus": lambda: _plus(0.3),
    "cross": lambda: [(x * 1.2, y * 1.2) for x, y in _rotate(_plus(0.25), math.pi / 4)],
    "hbar": lambda: _rect(1.0, 0.4),
    "vbar": lambda: _rect(0.4, 1.0),
    "t_shape": _t_shape,
}


def glyph_polygon(shape: str, cx: float, cy: float, half: float) -> list[Point]:
    """The shape scaled to half-size `half` around (cx, cy), rounded to 0.01 px (COCO precision)."""
    return [(round(cx + x * half, 2), round(cy + y * half, 2)) for x, y in SHAPES[shape]()]


def polygon_bbox(pts: Sequence[Point]) -> list[float]:
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return [round(min(xs), 2), round(min(ys), 2), round(max(xs) - min(xs), 2), round(max(ys) - min(ys), 2)]


def polygon_area(pts: Sequence[Point]) -> float:
    """Shoelace area: what pycocotools' polygon->mask area approximates."""
    n = len(pts)
    twice = sum(pts[i][0] * pts[(i + 1) % n][1] - pts[(i + 1) % n][0] * pts[i][1] for i in range(n))
    return round(abs(twice) / 2.0, 2)


def render_png(size: int, background: tuple[int, int, int],
               glyphs: Sequence[tuple[Sequence[Point], tuple[int, int, int]]]) -> bytes:
    """Fill each polygon in order on a flat background and return the PNG bytes (deterministic)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), background)
    draw = ImageDraw.Draw(img)
    for pts, rgb in glyphs:
        draw.polygon([tuple(p) for p in pts], fill=rgb)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)
    return buf.getvalue()
