"""Kernel-density curves of relevance scores for labelled sets, as in CSR's image-relevance figure.

    density_plot({"iter0 chosen": a, "iter0 rejected": b, "iter3 chosen": c, "iter3 rejected": d},
                 Path("reports/fig/relevance"))   # -> relevance.svg, relevance.png

Sets that differ only by the words "chosen"/"rejected" share a colour; "rejected" sets are dashed,
the others solid; a dotted vertical line marks each set's mean. The KDE is a plain Gaussian kernel
with Scott's bandwidth (sigma * n^(-1/5)), written here in numpy so no scipy is needed.
"""
from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_SIDE = re.compile(r"\b(chosen|rejected)\b", re.IGNORECASE)
# a set with no spread (n < 2 or all values equal) still gets a visible bump, 1 score unit wide
_DEGENERATE_BANDWIDTH = 1.0


def scott_bandwidth(values: Sequence[float]) -> float:
    """Scott's rule sigma * n^(-1/5), sigma with ddof=1; 1.0 for a set with no spread."""
    v = np.asarray(values, dtype=np.float64)
    sigma = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return sigma * v.size ** (-0.2) if sigma > 0 else _DEGENERATE_BANDWIDTH


def gaussian_kde(values: Sequence[float], grid: np.ndarray, bandwidth: float | None = None) -> np.ndarray:
    """Density at `grid` of a Gaussian-kernel estimate over `values`; integrates to 1 over the real line."""
    v = np.asarray(values, dtype=np.float64)
    h = scott_bandwidth(v) if bandwidth is None else bandwidth
    z = (np.asarray(grid, dtype=np.float64)[:, None] - v[None, :]) / h
    return np.exp(-0.5 * z ** 2).sum(axis=1) / (v.size * h * np.sqrt(2 * np.pi))


def _group(label: str) -> str:
    return " ".join(_SIDE.sub("", label).split()).lower()


def density_plot(sets: dict[str, Sequence[float]], out_stem: Path, title: str | None = None,
                 xlabel: str = "Image-Response Relevance Score") -> dict:
    """Write out_stem.svg and out_stem.png; returns {"svg", "png", "means", "bandwidths"}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evalsuite.files import write_bytes_atomic

    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in sets.items()}
    finite = np.concatenate([a for a in arrays.values() if a.size] or [np.zeros(1)])
    lo, hi = float(finite.min()), float(finite.max())
    pad = max(3 * max((scott_bandwidth(a) for a in arrays.values() if a.size), default=1.0), 1e-6)
    grid = np.linspace(lo - pad, hi + pad, 512)
    groups = list(dict.fromkeys(_group(k) for k in arrays))
    colours = plt.get_cmap("tab10")
    means: dict[str, float] = {}
    bandwidths: dict[str, float] = {}
    # set labels are user text: "$...$" in them stays literal (no mathtext parsing)
    with plt.rc_context({"svg.hashsalt": "evalsuite", "svg.fonttype": "none", "text.parse_math": False,
                         "text.usetex": False}):
        fig, ax = plt.subplots(figsize=(6.0, 4.0))
        for label, a in arrays.items():
            means[label] = float(a.mean()) if a.size else float("nan")
            if not a.size:
                continue
            colour = colours(groups.index(_group(label)) % 10)
            style = "--" if "rejected" in label.lower() else "-"
            bandwidths[label] = scott_bandwidth(a)
            ax.plot(grid, gaussian_kde(a, grid), linestyle=style, color=colour, label=f"{label} (n={a.size})")
            ax.axvline(means[label], linestyle=":", color=colour, linewidth=1.2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("Density")
        if title:
            ax.set_title(title)
        ax.legend(frameon=False, fontsize=8)
        fig.tight_layout()
        paths = {}
        for fmt, meta in (("svg", {"Date": None}), ("png", {"Software": None})):
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, metadata=meta, dpi=150)
            paths[fmt] = write_bytes_atomic(Path(f"{out_stem}.{fmt}"), buf.getvalue())
        plt.close(fig)
    return {"svg": paths["svg"], "png": paths["png"], "means": means, "bandwidths": bandwidths}
