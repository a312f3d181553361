"""Percentile bootstrap over requests of ratios of sums: one run's (sum num / sum den, e.g. requests
meeting the SLOs per second of client time) and two independent runs' ratio of them. Seeded, so an
evaluation replayed gives the same interval; the bounds are order statistics of the resamples
(no interpolation), so a resample dividing by zero (infinite) stays an end of the interval.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RESAMPLES = 2000


def _resampled_ratios(
    num: Sequence[float], den: Sequence[float], rng: np.random.Generator, k: int
) -> np.ndarray:
    n_, d_ = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    idx = rng.integers(0, len(n_), size=(k, len(n_)))
    with np.errstate(divide="ignore", invalid="ignore"):
        return n_[idx].sum(axis=1) / d_[idx].sum(axis=1)


def _bounds(values: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2
    values = values[~np.isnan(values)]
    lo, hi = np.quantile(values, [tail, 1 - tail], method="inverted_cdf")
    return float(lo), float(hi)


def ratio_of_sums(
    num: Sequence[float], den: Sequence[float], level: float = 0.95, seed: int = 0
) -> tuple[float, float | None, float | None]:
    """(sum num / sum den, its percentile bootstrap interval at ``level``); rows resampled together.
    No rows: (nan, None, None)."""
    if not len(num) or not sum(den):
        return float("nan"), None, None
    point = float(sum(num) / sum(den))
    lo, hi = _bounds(_resampled_ratios(num, den, np.random.default_rng(seed), RESAMPLES), level)
    return point, lo, hi


def ratio_of_ratios(
    a: tuple[Sequence[float], Sequence[float]],
    b: tuple[Sequence[float], Sequence[float]],
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float | None, float | None, float | None]:
    """(ra / rb, its interval) where r = sum num / sum den of each side, the sides resampled
    independently. None where b's ratio is 0 or a side has no rows."""
    (an, ad), (bn, bd) = a, b
    if not len(an) or not len(bn) or not sum(ad) or not sum(bd) or not sum(bn):
        return None, None, None
    rng = np.random.default_rng(seed)
    point = float((sum(an) / sum(ad)) / (sum(bn) / sum(bd)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = _resampled_ratios(an, ad, rng, RESAMPLES) / _resampled_ratios(bn, bd, rng, RESAMPLES)
    lo, hi = _bounds(ratios, level)
    return point, lo, hi
