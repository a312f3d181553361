"""Intervals of proportions: Wilson's score interval of one, and Newcombe's hybrid score interval of
the difference of two independent ones (Newcombe 1998, method 10), which keeps its level near the
nominal one for small counts and for proportions near 0 -- a failure rate is usually both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import norm


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's two-sided score interval of the proportion k / n at ``level`` ((0, 1) when n is 0)."""
    if n <= 0:
        return 0.0, 1.0
    z = float(norm.ppf(1 - (1 - level) / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class RateDifference:
    """Side a's proportion minus side b's, with the one-sided lower bound at ``level``."""

    a: float
    b: float
    lower: float
    level: float

    @property
    def worse(self) -> bool:
        """a is higher than b with confidence: the lower bound is above 0."""
        return self.lower > 0


def rate_excess(k_a: int, n_a: int, k_b: int, n_b: int, level: float = 0.95) -> RateDifference:
    """How much higher side a's rate k_a / n_a is than side b's, with Newcombe's one-sided lower bound
    at ``level`` (the lower end of the two-sided interval at 2 * level - 1). A side with no trials has
    rate 0 and a lower bound of -1: nothing is shown."""
    if n_a <= 0 or n_b <= 0:
        return RateDifference(0.0, 0.0, -1.0, level)
    two_sided = 2 * level - 1
    pa, pb = k_a / n_a, k_b / n_b
    la, _ = wilson_interval(k_a, n_a, two_sided)
    _, ub = wilson_interval(k_b, n_b, two_sided)
    lower = (pa - pb) - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2)
    return RateDifference(pa, pb, lower, level)
