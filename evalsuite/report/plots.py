"""Matplotlib figures as inline SVG text that follows the page's light/dark colours.

Text, axes and grid are drawn in a sentinel colour that is then replaced by `currentColor`, so an
inline <svg> takes the colour of the surrounding text in either colour scheme. Each figure gets its
own `svg.hashsalt`, so the clip-path ids of several inline SVGs in one page never collide.
"""
from __future__ import annotations

import io
import itertools
import math
import re
import textwrap
from pathlib import Path

_INK = "#010203"           # sentinel for "the page's text colour"
_salt = itertools.count()
PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _style() -> dict:
    return {
        "svg.fonttype": "none", "font.size": 9, "font.family": "sans-serif",
        "text.color": _INK, "axes.labelcolor": _INK, "axes.edgecolor": _INK, "xtick.color": _INK,
        "ytick.color": _INK, "axes.facecolor": "none", "figure.facecolor": "none",
        "savefig.facecolor": "none", "axes.grid": True, "grid.color": _INK, "grid.alpha": 0.15,
        "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
        "axes.prop_cycle": __import__("cycler").cycler(color=PALETTE),
        # labels, titles and legends carry user strings (checkpoint labels, metric names): "$...$" in
        # them is literal text, never mathtext (which would fail to parse or render something else)
        "text.parse_math": False, "text.usetex": False,
    }


def to_svg(fig) -> str:
    """Figure -> inline <svg> element text (see `finish_svg`)."""
    plt = _plt()
    buf = io.StringIO()
    with plt.rc_context({"svg.hashsalt": f"evalsuite-{next(_salt)}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return finish_svg(buf.getvalue())


def finish_svg(svg: str) -> str:
    """SVG file text -> an element for inlining: no XML prolog, no metadata block, sentinel colour ->
    currentColor, and CSS-sized (width/height dropped, viewBox kept)."""
    svg = svg[svg.index("<svg"):]
    # the Dublin Core block only names matplotlib and a date: bytes and URLs the page does not need
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.S)
    svg = svg.replace(_INK, "currentColor")
    head, rest = svg.split(">", 1)
    head = re.sub(r'\s(width|height)="[^"]*"', "", head).replace("<svg", '<svg class="plot"', 1)
    return head + ">" + rest


def _x(points: list[dict]) -> tuple[list[float], list[str]]:
    """x positions: the iteration when every point has one, else the checkpoint order."""
    if all(p.get("iteration") is not None for p in points):
        return [float(p["iteration"]) for p in points], [str(p["iteration"]) for p in points]
    return list(range(len(points))), [p["name"] for p in points]


def y_limits(values: list[float], lows: list[float], highs: list[float], min_rel: float = 0.1) -> tuple[float, float]:
    """An axis that holds every point and CI and spans at least `min_rel` of the largest magnitude, so
    differences far smaller than the values (chance-level noise) do not fill the plot."""
    lo, hi = min(values + lows), max(values + highs)
    span = hi - lo
    mag = max(abs(v) for v in values + lows + highs)
    need = min_rel * mag if mag > 0 else 1.0
    pad = max(0.08 * span, (need - span) / 2)
    lo, hi = lo - pad, hi + pad
    if min(values + lows) >= 0 > lo:     # a non-negative metric's axis never dips below 0 for padding
        lo, hi = 0.0, hi - lo
    return lo, hi


def metric_plot(title: str, points: list[dict], direction: str | bool) -> str:
    """One metric across checkpoints: line + markers, CI band where the points have CIs, a dotted line
    at the first (base) value; the y-axis follows `y_limits`."""
    if isinstance(direction, bool):
        direction = "up" if direction else "down"
    plt = _plt()
    with plt.rc_context(_style()):
        fig, ax = plt.subplots(figsize=(3.4, 2.3))
        xs, labels = _x(points)
        ys = [p["value"] for p in points]
        ax.plot(xs, ys, marker="o", ms=4, lw=1.6, color=PALETTE[0])
        lows = highs = []
        if points and all(p.get("ci_low") is not None for p in points):
            lows, highs = [p["ci_low"] for p in points], [p["ci_high"] for p in points]
            ax.fill_between(xs, lows, highs, color=PALETTE[0], alpha=0.2, lw=0)
        if ys:
            ax.axhline(ys[0], color=_INK, lw=0.8, ls=":", alpha=0.6)
            ax.set_ylim(*y_limits(ys, lows, highs))
        ax.set_xticks(xs, labels, rotation=30 if not points or points[0].get("iteration") is None else 0)
        ax.set_xlabel("iteration")
        arrow = {"up": "↑", "down": "↓"}.get(direction, "(no direction)")
        # wrapped, so a long name does not widen the figure (and shrink it on the page)
        ax.set_title(textwrap.fill(f"{title}  {arrow}", 42), fontsize=9, loc="left")
        return to_svg(fig)


def csr_plots(series: dict[str, list[dict]]) -> list[str]:
    """Chosen vs rejected reward per iteration (with CI bands), and the reward gap as bars."""
    plt = _plt()
    out = []
    with plt.rc_context(_style()):
        fig, ax = plt.subplots(figsize=(4.6, 2.8))
        for name, color in (("chosen_reward_mean", PALETTE[2]), ("rejected_reward_mean", PALETTE[3])):
            pts = series.get(name) or []
            if not pts:
                continue
            xs, labels = _x(pts)
            ax.plot(xs, [p["value"] for p in pts], marker="o", ms=4, color=color,
                    label=name.replace("_reward_mean", ""))
            if all(p.get("ci_low") is not None for p in pts):
                ax.fill_between(xs, [p["ci_low"] for p in pts], [p["ci_high"] for p in pts],
                                color=color, alpha=0.18, lw=0)
            ax.set_xticks(xs, labels)
        ax.set_xlabel("iteration")
        ax.set_title("mean reward of chosen vs rejected", fontsize=9, loc="left")
        ax.legend()
        out.append(to_svg(fig))
        gap = series.get("reward_gap") or []
        if gap:
            fig, ax = plt.subplots(figsize=(4.6, 2.8))
            xs, labels = _x(gap)
            vals = [p["value"] for p in gap]
            err = None
            if all(p.get("ci_low") is not None for p in gap):
                err = [[v - p["ci_low"] for v, p in zip(vals, gap)], [p["ci_high"] - v for v, p in zip(vals, gap)]]
            ax.bar(xs, vals, width=0.6, color=PALETTE[0], yerr=err, ecolor=_INK, capsize=3)
            ax.axhline(0, color=_INK, lw=0.8)
            ax.set_xticks(xs, labels)
            ax.set_xlabel("iteration")
            ax.set_title("reward gap (chosen - rejected)", fontsize=9, loc="left")
            out.append(to_svg(fig))
    return out


def density_plot(title: str, sets: dict[str, list[float]]) -> str:
    """KDE curves of several value sets on one axis, drawn by the project's relevance figure helper
    (`evalsuite.metrics.relevance_plot`: "rejected" sets dashed, chosen/rejected of one iteration
    share a colour, dotted means) in the page's colours. Sets with < 2 finite values are skipped."""
    import tempfile

    from evalsuite.metrics.relevance_plot import density_plot as relevance_density

    plt = _plt()
    sets = {k: [float(x) for x in v if x is not None and math.isfinite(float(x))] for k, v in sets.items()}
    sets = {k: v for k, v in sets.items() if len(v) >= 2}
    with tempfile.TemporaryDirectory() as tmp, plt.rc_context(_style()):
        out = relevance_density(sets, Path(tmp) / "density", title=title, xlabel="relevance")
        return finish_svg(Path(out["svg"]).read_text(encoding="utf-8"))


TRAIN_PANELS = (("training loss (DPO, + NLL with rpo_alpha)", (("loss", "-"),)),
                ("reward margin (chosen − rejected)", (("rewards/margins", "-"),)),
                ("reward accuracy", (("rewards/accuracies", "-"),)),
                ("log-prob: chosen (solid), rejected (dashed)", (("logps/chosen", "-"), ("logps/rejected", "--"))))


def training_plots(series: dict[str, list[dict]]) -> list[dict]:
    """DPO training curves against the step, one line per CSR iteration (`series`: label -> the step
    rows of its trainer log): loss, reward margin, reward accuracy, chosen/rejected log-probs.
    A panel no iteration logged is left out."""
    plt = _plt()
    out = []
    with plt.rc_context(_style()):
        for title, fields in TRAIN_PANELS:
            fig, ax = plt.subplots(figsize=(3.6, 2.4))
            drawn = False
            for i, (label, rows) in enumerate(series.items()):
                for j, (field, ls) in enumerate(fields):
                    pts = [(float(r["step"]), float(r[field])) for r in rows
                           if isinstance(r.get(field), (int, float)) and isinstance(r.get("step"), (int, float))]
                    if not pts:
                        continue
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, ls=ls, lw=1.4, color=PALETTE[i % len(PALETTE)], marker="o" if len(pts) < 8 else None,
                            ms=3, label=label if j == 0 else None)
                    drawn = True
            if not drawn:
                plt.close(fig)
                continue
            ax.set_xlabel("step")
            ax.set_title(title, fontsize=9, loc="left")
            if len(series) > 1:
                ax.legend(fontsize=7)
            out.append({"title": title, "svg": to_svg(fig)})
    return out
