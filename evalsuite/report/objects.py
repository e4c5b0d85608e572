"""The report's per-object section: for each task with object records (evalsuite/store/objects.py), per
setup and lineage, a table of the objects whose hallucination rate changed most between the base and
its latest checkpoint (rate per checkpoint with its counts, Δ with the paired CI over images), and one
figure of small multiples: each of those objects' rate across the lineage's checkpoints, sorted by Δ.

Every string reaches the page through the template's autoescape; the figure's text is matplotlib's
SVG text (escaped by its XML writer)."""
from __future__ import annotations

import textwrap

from evalsuite.errors import UserError

TOP = 12          # objects in a table
PANELS = 8        # objects in a figure


def object_sections(table, records_of: dict, *, base: str | None = None, n_boot: int = 1000,
                    seed: int = 0) -> dict:
    """{"sections": [...], "problem": str | None} for the template (`problem`: why no comparison could be
    made although object records exist, e.g. a --base without them)."""
    from evalsuite.store import objects

    tasks = objects.object_tasks(table.tidy, records_of)
    if not tasks:
        return {"sections": [], "problem": None}
    try:
        comps = objects.comparisons(table, records_of, base=base, n_boot=n_boot, seed=seed)
    except UserError as e:
        return {"sections": [], "problem": str(e)}
    problem = None if comps else (f"{', '.join(tasks)}: no two checkpoints of one lineage with per-object "
                                  "records in one setup")
    return {"sections": [_section(c) for c in comps], "problem": problem}


def _cell(t: dict) -> dict:
    from evalsuite.store.table import fmt

    return {"rate": "–" if t["rate"] is None else fmt(t["rate"]), "counts": f"{t['hallucinated']}/{t['mentions']}",
            "sort": "" if t["rate"] is None else t["rate"]}


def _section(c) -> dict:
    from evalsuite.store.objects import per_image_text
    from evalsuite.store.table import fmt

    top = c.top(TOP)
    rows = []
    for r in top:
        cls = "" if not r.significant else "better" if r.delta < 0 else "worse"
        rows.append({"object": r.object, "delta": fmt(r.delta, signed=True), "sort": r.delta,
                     "dci": f"[{fmt(r.low, True)}, {fmt(r.high, True)}]" if r.low is not None else "",
                     "cls": cls, "cells": [_cell(s["objects"].get(r.object, _ZERO)) for s in c.series],
                     "per_image": per_image_text(r), "per_image_sort": r.per_image[0]})
    panels = sorted(sorted(top, key=lambda r: -abs(r.delta))[:PANELS], key=lambda r: (r.delta, r.object))
    tag = ", ".join(x for x in (c.variant, c.setup) if x)
    return {"task": c.task, "tag": tag, "base": c.base, "vs": c.vs, "n_images": c.n_images, "n_objects": len(c.rows),
            "ckpts": [{"name": s["name"], "iteration": s["iteration"]} for s in c.series], "rows": rows,
            "one_sided": [{"object": r.object, "base": _cell(r.base), "vs": _cell(r.vs), "per_image": per_image_text(r)}
                          for r in c.one_sided],
            "notes": c.notes, "svg": object_plot(c, panels) if panels else None}


_ZERO = {"mentions": 0, "hallucinated": 0, "images": 0, "rate": None}


def object_plot(c, rows) -> str:
    """Small multiples: one panel per object (sorted by Δ, largest fall first), its hallucination rate at
    each checkpoint of the lineage (a missing point: no mention), dotted = the base's rate."""
    from evalsuite.report.plots import PALETTE, _INK, _plt, _style, _x, to_svg

    plt = _plt()
    cols = min(4, len(rows))
    nrows = -(-len(rows) // cols)
    with plt.rc_context(_style()):
        fig, axes = plt.subplots(nrows, cols, figsize=(1.9 * cols + 0.4, 1.7 * nrows + 0.5), sharey=True,
                                 squeeze=False)
        xs, labels = _x(c.series)
        # one scale for every panel (shared y), fitted to the rates shown: demo rates of 0.2 stay readable
        top = max([s["objects"].get(r.object, _ZERO)["rate"] or 0.0 for r in rows for s in c.series] + [0.05])
        for ax, r in zip(axes.flat, rows):
            ys = [s["objects"].get(r.object, _ZERO)["rate"] for s in c.series]
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            color = PALETTE[0] if not r.significant else PALETTE[2] if r.delta < 0 else PALETTE[3]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=4, lw=1.5, color=color)
            if ys[0] is not None:
                ax.axhline(ys[0], color=_INK, lw=0.8, ls=":", alpha=0.6)
            ax.set_xticks(xs, labels, rotation=0 if c.series[0].get("iteration") is not None else 30)
            star = "*" if r.significant else ""
            ax.set_title(textwrap.shorten(r.object, 18, placeholder="…") + f"  Δ {r.delta:+.2f}{star}",
                         fontsize=8, loc="left")
            ax.set_ylim(-0.04 * top, min(1.0, top * 1.15) + 0.02 * top)
        for ax in list(axes.flat)[len(rows):]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("hallucination rate", fontsize=7)
        for ax in axes[-1, :]:
            ax.set_xlabel("iteration" if c.series[0].get("iteration") is not None else "checkpoint", fontsize=7)
        fig.suptitle(textwrap.shorten(f"{c.task}: per-object rate, {c.base} → {c.vs}", 70, placeholder="…"),
                     fontsize=9, x=0.02, ha="left")
        fig.tight_layout()
        return to_svg(fig)
