"""The bootstrap helpers in evalsuite.metrics.stats: resample counts, CIs over column sums, paired deltas."""
import numpy as np
import pytest

from evalsuite.metrics.stats import (
    f1_stat,
    paired_delta_ci,
    ratio_stat,
    resample_counts,
    sum_of_ratios_stat,
    sums_ci,
)


def _mean_rows(x):
    """Values -> rows (x, 1): their column sums' ratio is the mean."""
    x = np.asarray(x, dtype=float)
    return np.stack([x, np.ones_like(x)], axis=1)


def test_resample_counts_sum_to_n_keep_strata_sizes_and_follow_the_seed():
    """8 rows in strata x (3) and y (5): every replicate draws 3 from x's rows and 5 from y's."""
    strata = np.array(["x"] * 3 + ["y"] * 5)
    chunks = list(resample_counts(8, 600, seed=1, strata=strata, chunk=250))
    assert [len(c) for c in chunks] == [250, 250, 100]
    counts = np.concatenate(chunks)
    assert (counts[:, :3].sum(1) == 3).all() and (counts[:, 3:].sum(1) == 5).all()
    again = np.concatenate(list(resample_counts(8, 600, seed=1, strata=strata)))
    assert (counts == again).all()
    other = np.concatenate(list(resample_counts(8, 600, seed=2, strata=strata)))
    assert not (counts == other).all()


def test_statistics_of_column_sums_by_hand():
    """ratio: 1/2 and 0/0 = 0; F1 from (tp 2, said yes 3, truly yes 4) = 2*2/(3+4) = 4/7;
    sum of ratios (MME's categories): 1/2 + 3/4 = 1.25."""
    assert ratio_stat(np.array([[1.0, 2.0], [0.0, 0.0]])).tolist() == [0.5, 0.0]
    assert f1_stat(np.array([[2.0, 3.0, 4.0]]))[0] == pytest.approx(4 / 7)
    assert sum_of_ratios_stat(np.array([[1.0, 2.0, 3.0, 4.0]]))[0] == pytest.approx(1.25)


def test_paired_delta_of_two_samples_by_hand():
    """a = (0, 1), b = (0, 0): delta of means 0.5. A replicate draws 2 of the 2 samples: it holds sample 2
    zero, one or two times with probability 1/4, 1/2, 1/4, so the delta is 0, 0.5 or 1 and the 95%
    percentile interval is [0, 1]."""
    delta, lo, hi = paired_delta_ci(_mean_rows([0, 1]), _mean_rows([0, 0]), ratio_stat, n_boot=4000, seed=0)
    assert (delta, lo, hi) == (0.5, 0.0, 1.0)


def test_pairing_cancels_what_the_samples_share():
    """b = 50 spread-out values, a = b + 0.2 on every sample: each replicate's delta is exactly 0.2, so
    the paired CI has no width; each checkpoint's own CI is wide, and so is any combination of the two."""
    b = np.linspace(0.0, 1.0, 50)
    delta, lo, hi = paired_delta_ci(_mean_rows(b + 0.2), _mean_rows(b), ratio_stat, n_boot=500, seed=3)
    assert delta == pytest.approx(0.2) and lo == pytest.approx(0.2) and hi == pytest.approx(0.2)
    own_lo, own_hi = sums_ci(_mean_rows(b), ratio_stat, n_boot=500, seed=3)
    assert own_hi - own_lo > 0.1


def test_stratified_ci_of_a_constant_per_stratum_is_a_point():
    """Two strata whose values are constant within each: any stratified replicate has the same sums."""
    rows = np.array([[1.0, 1.0, 0.0, 0.0]] * 3 + [[0.0, 0.0, 5.0, 1.0]] * 4)
    lo, hi = sums_ci(rows, sum_of_ratios_stat, n_boot=300, strata=np.array([0] * 3 + [1] * 4))
    assert lo == pytest.approx(6.0) and hi == pytest.approx(6.0)


def test_empty_and_mismatched_inputs():
    lo, hi = sums_ci(np.zeros((0, 2)), ratio_stat)
    assert np.isnan(lo) and np.isnan(hi)
    assert all(np.isnan(paired_delta_ci(np.zeros((0, 2)), np.zeros((0, 2)), ratio_stat)))
    with pytest.raises(ValueError, match="differ in shape"):
        paired_delta_ci(_mean_rows([1, 2]), _mean_rows([1]), ratio_stat)
