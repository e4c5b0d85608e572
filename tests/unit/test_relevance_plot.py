"""Relevance density plot: the KDE by hand, and the figure files."""
from __future__ import annotations

import numpy as np
import pytest

from evalsuite.metrics.relevance_plot import density_plot, gaussian_kde, scott_bandwidth


def test_scott_bandwidth_by_hand():
    """[1..5]: sigma(ddof=1) = sqrt(2.5) = 1.5811388, n^(-1/5) = 5^-0.2 = 0.7247797 -> h = 1.1459773.
    No spread (one value, or all equal) -> the documented 1.0."""
    assert scott_bandwidth([1, 2, 3, 4, 5]) == pytest.approx(1.1459773, abs=1e-6)
    assert scott_bandwidth([7.0]) == 1.0 and scott_bandwidth([2.0, 2.0]) == 1.0


def test_gaussian_kde_by_hand():
    """One point at 0, h = 1: density at 0 is 1/sqrt(2 pi) = 0.3989423, at 1 it is e^-0.5 times that
    = 0.2419707. Two points {0, 2}, h = 1, at 1: both kernels give 0.2419707, averaged -> 0.2419707."""
    np.testing.assert_allclose(gaussian_kde([0.0], np.array([0.0, 1.0]), 1.0), [0.3989423, 0.2419707], atol=1e-7)
    np.testing.assert_allclose(gaussian_kde([0.0, 2.0], np.array([1.0]), 1.0), [0.2419707], atol=1e-7)
    grid = np.linspace(-20, 40, 6001)
    dens = gaussian_kde([1.0, 5.0, 9.0, 10.0], grid)
    assert float(np.sum(dens) * (grid[1] - grid[0])) == pytest.approx(1.0, abs=1e-6)


def test_density_plot_files_styles_and_means(tmp_path):
    sets = {"iter0 chosen": [20.0, 22.0, 24.0, 23.0], "iter0 rejected": [18.0, 21.0, 19.0, 20.0],
            "iter3 chosen": [27.0, 26.0, 28.0], "iter3 rejected": [25.0, 24.5, 25.5], "empty": []}
    out = density_plot(sets, tmp_path / "fig" / "relevance")
    assert out["svg"] == tmp_path / "fig" / "relevance.svg" and out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out["means"]["iter0 chosen"] == 22.25 and out["means"]["iter3 rejected"] == 25.0
    assert np.isnan(out["means"]["empty"]) and "empty" not in out["bandwidths"]
    svg = out["svg"].read_text()
    assert svg.lstrip().startswith("<?xml") and "iter3 rejected (n=3)" in svg
    assert "stroke-dasharray" in svg   # dashed rejected curves and dotted mean lines
    again = density_plot(sets, tmp_path / "again")
    assert again["svg"].read_bytes() == out["svg"].read_bytes()   # deterministic output
