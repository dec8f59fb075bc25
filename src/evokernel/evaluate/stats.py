"""Statistics of raw per-call times, computed in the parent only.

* `timing_stats`: IQR fences (Q1 - 1.5 IQR, Q3 + 1.5 IQR) drop outliers (counted), then median,
  P5 and P95 of what is left.
* `paired_speedup`: the median over rounds of baseline_time / candidate_time, where both calls
  of a round ran back to back (in random order) on fresh inputs; its 95% interval is a
  percentile bootstrap of that median (resampling rounds, a fixed seed, so a result is
  reproducible from its raw times). Pairing cancels drift (clocks, temperature, neighbours)
  that affects both calls of a round alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evokernel.evaluate.result import TimingStats

BOOTSTRAP_SAMPLES = 4000
BOOTSTRAP_SEED = 20240611


def iqr_filter(values: Sequence[float]) -> tuple[np.ndarray, int]:
    """(kept values, number dropped) by Tukey's fences."""
    xs = np.asarray(values, dtype=np.float64)
    if xs.size < 4:
        return xs, 0
    q1, q3 = np.percentile(xs, [25, 75])
    spread = q3 - q1
    keep = (xs >= q1 - 1.5 * spread) & (xs <= q3 + 1.5 * spread)
    return xs[keep], int(xs.size - keep.sum())


def timing_stats(values: Sequence[float]) -> TimingStats:
    kept, dropped = iqr_filter(values)
    if kept.size == 0:
        return TimingStats(0.0, 0.0, 0.0, 0, dropped)
    p5, median, p95 = np.percentile(kept, [5, 50, 95])
    return TimingStats(
        median_us=float(median),
        p5_us=float(p5),
        p95_us=float(p95),
        n=int(kept.size),
        outliers_dropped=dropped,
    )


def median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64))) if len(values) else 0.0


def paired_speedup(
    baseline: Sequence[float], candidate: Sequence[float]
) -> tuple[float, tuple[float, float]]:
    """(median of per-round ratios baseline/candidate, bootstrap 95% interval)."""
    base = np.asarray(baseline, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if base.size != cand.size or base.size == 0:
        raise ValueError("paired_speedup needs two equally long, non-empty series")
    ratios = base / np.maximum(cand, 1e-9)
    point = float(np.median(ratios))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    picks = rng.integers(0, ratios.size, size=(BOOTSTRAP_SAMPLES, ratios.size))
    medians = np.median(ratios[picks], axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return point, (float(low), float(high))
