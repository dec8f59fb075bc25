"""Statistics: IQR filtering, paired speedups and their bootstrap interval."""

from __future__ import annotations

import numpy as np

from evokernel.evaluate.stats import iqr_filter, paired_speedup, timing_stats


def test_iqr_drops_outliers_and_counts_them() -> None:
    values = [10.0] * 20 + [10.5] * 20 + [200.0, 0.01]
    kept, dropped = iqr_filter(values)
    assert dropped == 2 and kept.max() <= 10.5
    stats = timing_stats(values)
    assert stats.outliers_dropped == 2 and stats.n == 40
    assert 10.0 <= stats.p5_us <= stats.median_us <= stats.p95_us <= 10.5


def test_paired_speedup_is_the_median_ratio_with_a_reproducible_interval() -> None:
    rng = np.random.default_rng(0)
    drift = 1 + 0.3 * np.sin(np.arange(60) / 5)  # common drift cancels in the pairs
    base = 20.0 * drift * (1 + 0.01 * rng.standard_normal(60))
    cand = 10.0 * drift * (1 + 0.01 * rng.standard_normal(60))
    point, (low, high) = paired_speedup(base, cand)
    assert 1.95 < low <= point <= high < 2.05
    assert paired_speedup(base, cand) == (point, (low, high))


def test_no_difference_straddles_one() -> None:
    rng = np.random.default_rng(1)
    base = 10 + rng.standard_normal(50)
    cand = 10 + rng.standard_normal(50)
    _, (low, high) = paired_speedup(base, cand)
    assert low < 1.0 < high
