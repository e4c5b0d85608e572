"""Seeded bootstrap confidence intervals, shared by every metric that reports a CI."""
from __future__ import annotations

from typing import Callable

import numpy as np


def bootstrap_ci(
    data: np.ndarray,
    stat_fn: Callable[[np.ndarray], float],
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of `stat_fn` over rows of `data` (shape (n,) or (n, k)).

    Rows are resampled together, so ratio metrics (sum of column 0 / sum of column 1, as CHAIR_i)
    keep their pairing. An empty `data` gives (nan, nan): there is nothing to resample.
    """
    data = np.asarray(data)
    n = len(data)
    if n == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    stats = np.array([stat_fn(data[i]) for i in idx], dtype=float)
    lo, hi = np.nanpercentile(stats, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return (float(lo), float(hi))


def safe_ratio(num: float, den: float) -> float:
    """num/den with 0/0 = 0.0: a caption set with no mentions has no hallucinated mentions."""
    return float(num) / float(den) if den else 0.0
