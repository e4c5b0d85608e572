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


# ---- bootstrap over column sums: one resampling shared by two checkpoints (paired) -------------------
#
# Every statistic the report compares is a function of column sums over per-sample rows: a mean is
# sum(x) / sum(1), CHAIR_i is sum(hallucinated) / sum(mentions), POPE's F1 is 2 sum(tp) /
# (sum(said yes) + sum(truly yes)), MME's score adds one mean per category. So a bootstrap replicate is a
# vector of resample counts c (c_i = how often row i was drawn) and its statistic is stat(c @ rows): one
# matrix product for all replicates, and the same c applied to two checkpoints' rows of the same
# samples gives the paired difference.

def resample_counts(n: int, n_boot: int, seed: int = 0, strata=None, chunk: int = 250):
    """Yield (m, n) float32 arrays of bootstrap resample counts, m <= `chunk` rows at a time, `n_boot` in
    all. Each row sums to n; with `strata` (a length-n label array) each stratum is resampled on its
    own, so it keeps its size in every replicate (MME's categories are fixed by design)."""
    rng = np.random.default_rng(seed)
    groups = [np.arange(n)] if strata is None else [np.flatnonzero(np.asarray(strata) == s)
                                                    for s in dict.fromkeys(np.asarray(strata).tolist())]
    done = 0
    while done < n_boot:
        m = min(chunk, n_boot - done)
        flat = np.concatenate([g[rng.integers(0, len(g), size=(m, len(g)))] for g in groups], axis=1)
        flat = flat + (np.arange(m) * n)[:, None]
        yield np.bincount(flat.ravel(), minlength=m * n).reshape(m, n).astype(np.float32)
        done += m


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.nanpercentile(values, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def sums_ci(rows, stat: Callable[[np.ndarray], np.ndarray], n_boot: int = 1000, seed: int = 0,
            level: float = 0.95, strata=None, counts=None) -> tuple[float, float]:
    """Percentile bootstrap CI of `stat` (column sums (m, k) -> values (m,)) over the rows (n, k).
    `counts`: resample count arrays drawn before (`resample_counts` of this n), to share one draw."""
    rows = np.asarray(rows, dtype=float)
    if len(rows) == 0 or n_boot < 1:
        return (float("nan"), float("nan"))
    counts = resample_counts(len(rows), n_boot, seed, strata) if counts is None else counts
    reps = [stat(c @ rows) for c in counts]
    return _percentiles(np.concatenate(reps), level)


def paired_delta_ci(a, b, stat: Callable[[np.ndarray], np.ndarray], n_boot: int = 1000, seed: int = 0,
                    level: float = 0.95, strata=None, counts=None) -> tuple[float, float, float]:
    """(delta, low, high) of stat(a) - stat(b), where row i of `a` and of `b` are the same sample (image,
    question) scored for two checkpoints: each replicate draws the samples once and applies the draw to
    both, so what the two share (an easy image, a hard question) cancels in the difference.
    `counts` as in `sums_ci`."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired rows differ in shape: {a.shape} vs {b.shape}")
    if len(a) == 0 or n_boot < 1:
        return (float("nan"), float("nan"), float("nan"))
    delta = float(stat(a.sum(0)[None])[0] - stat(b.sum(0)[None])[0])
    counts = resample_counts(len(a), n_boot, seed, strata) if counts is None else counts
    reps = [stat(c @ a) - stat(c @ b) for c in counts]
    lo, hi = _percentiles(np.concatenate(reps), level)
    return (delta, lo, hi)


def ratio_stat(sums: np.ndarray) -> np.ndarray:
    """Column 0 / column 1 of each row of sums (0/0 = 0, as `safe_ratio`)."""
    num, den = sums[:, 0], sums[:, 1]
    return np.divide(num, den, out=np.zeros_like(num), where=den != 0)


def f1_stat(sums: np.ndarray) -> np.ndarray:
    """F1 from sums of (true positive, predicted positive, actual positive): 2 tp / (pred + actual)."""
    tp, den = 2 * sums[:, 0], sums[:, 1] + sums[:, 2]
    return np.divide(tp, den, out=np.zeros_like(tp), where=den != 0)


def sum_of_ratios_stat(sums: np.ndarray) -> np.ndarray:
    """Sum over column pairs (0/1, 2/3, ...) of their ratios: MME adds one mean score per category."""
    num, den = sums[:, 0::2], sums[:, 1::2]
    return np.divide(num, den, out=np.zeros_like(num), where=den != 0).sum(axis=1)
