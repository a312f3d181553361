"""Distribution-free confidence intervals of percentiles: the order-statistic interval [X(l), X(u)] of
the sorted values, with l and u from the binomial distribution of how many values fall below the true
quantile. It covers the true percentile at least at its level whatever the distribution (checked by
``benchmarks/ci_coverage.py``), and is None where there are too few values for a bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import binom


def _order_indices(n: int, q: float, level: float) -> tuple[int | None, int | None]:
    """1-based order-statistic indices (l, u) of the equal-tailed distribution-free interval
    [X(l), X(u)] for the q-quantile (q in 0..1) at confidence ``level``.

    The count of values below the true quantile is Binomial(n, q), so P(X(l) > quantile) =
    P(Bin <= l - 1) and P(X(u) < quantile) = P(Bin >= u); l is the largest and u the smallest index
    keeping each tail at or below (1 - level) / 2. None where no order statistic is far enough out.
    """
    tail = (1 - level) / 2
    cdf = binom.cdf(np.arange(n + 1), n, q)
    eps = 1e-12
    lo = int(np.count_nonzero(cdf <= tail + eps))  # cdf[k] <= tail for k = 0 .. lo - 1
    hi = int(np.argmax(cdf >= 1 - tail - eps)) + 1
    return (lo if lo >= 1 else None), (hi if hi <= n else None)


def min_samples_for_ci(q: float = 95, level: float = 0.95) -> int:
    """The smallest n whose distribution-free interval for the q-th percentile has both bounds."""
    p, tail = q / 100, (1 - level) / 2
    n = max(1, math.floor(math.log(tail) / math.log(p)) - 1)
    while None in _order_indices(n, p, level):
        n += 1
    return n


def quantile_ci(
    values: Sequence[float], q: float = 95, level: float = 0.95
) -> tuple[float | None, float | None]:
    """Distribution-free (binomial-exact, order-statistic) confidence interval of the q-th percentile.

    Coverage is at least ``level`` for any continuous distribution (above it, as order statistics
    are discrete). (None, None) when there are too few values for both bounds to exist: n/a, not a
    bar (p95 at 95 %: n >= 72, see :func:`min_samples_for_ci`).
    """
    n = len(values)
    if n < 2:
        return None, None
    lo, hi = _order_indices(n, q / 100, level)
    if lo is None or hi is None:
        return None, None
    a = np.sort(np.asarray(values, dtype=float))
    return float(a[lo - 1]), float(a[hi - 1])


def quantile_ratio_ci(
    candidate: Sequence[float], baseline: Sequence[float], q: float = 95, level: float = 0.95
) -> tuple[float | None, float | None]:
    """Confidence interval of (candidate q-th percentile) / (baseline q-th percentile).

    Each run gets its distribution-free interval at sqrt(level); the two runs are independent, so both
    cover at once with probability >= level, and then the ratio lies in
    [cand_low / base_high, cand_high / base_low]. (None, None) when either run has too few values.
    """
    per_run = math.sqrt(level)
    cl, ch = quantile_ci(candidate, q, per_run)
    bl, bh = quantile_ci(baseline, q, per_run)
    if None in (cl, ch, bl, bh) or not bl or not bh:
        return None, None
    return cl / bh, ch / bl  # type: ignore[operator]


def min_samples_for_ratio_ci(q: float = 95, level: float = 0.95) -> int:
    """The measured requests each run needs for :func:`quantile_ratio_ci` to exist: both runs' intervals
    at sqrt(level) (p95 at 95 %: 86)."""
    return min_samples_for_ci(q, math.sqrt(level))


def censored(values: Sequence[float | None], at: float) -> list[float]:
    """Values with each missing one (a failed or timed-out request: None) counted as ``at``, the request
    timeout: a censored value, never dropped, so a percentile with failures is never better than
    without them. A success slower than ``at`` (a timeout configured shorter since the run) raises the
    censored value to it, so a failure never ranks below a success."""
    top = max([at, *(float(v) for v in values if v is not None)])
    return [top if v is None else float(v) for v in values]


def estimated_level(q: float, n: int) -> float:
    """The percentile a q-th percentile of ``n`` values (linear interpolation, numpy's default) estimates.

    It interpolates at 0-based rank (n - 1) q / 100, i.e. between order statistics near 1 + (n - 1) q / 100;
    the k-th of n values sits on average at the k / (n + 1) quantile of their distribution, so the
    estimate is of the 100 (1 + (n - 1) q / 100) / (n + 1)-th percentile: with 20 values the "p95" is
    about the p90.7, and it reaches p95 only as n grows."""
    if n < 1:
        raise ValueError(f"a percentile needs at least one value, not {n}")
    return 100 * (1 + (n - 1) * q / 100) / (n + 1)


def quantile_name(q: float, n: int | None) -> str:
    """The honest name of the q-th percentile of ``n`` values: ``p95`` when it estimates the p95 to within
    half a percentile (180 values for the p95), else the percentile it does estimate, ``p90.7``
    (:func:`estimated_level`); ``p95`` when ``n`` is not known."""
    named = f"p{q:g}"
    if n is None:
        return named
    level = estimated_level(q, n)
    return named if abs(level - q) < 0.5 else f"p{level:.1f}"


def min_samples_for_name(q: float) -> int:
    """The fewest values whose q-th percentile :func:`quantile_name` calls by its name (p95: 180)."""
    n = 1
    while quantile_name(q, n) != f"p{q:g}":
        n += 1
    return n
