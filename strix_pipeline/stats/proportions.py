"""Two proportions compared: k1 of n1 against k2 of n2 (failed runs of two releases, excluded runs of
two sides), with an exact two-sided p-value.

Boschloo's exact test (scipy.stats.boschloo_exact): exact at any count, where the normal
approximation of the textbook z-test is not (10 to 20 runs a side, often none failed), and more
powerful than Fisher's exact test, which conditions on the margins (0 of 14 against 4 of 14: Fisher
p = 0.10, Boschloo 0.04). Pure: counts in, a typed result out.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from scipy import stats


@dataclass(frozen=True)
class Proportions:
    """``k1`` of ``n1`` against ``k2`` of ``n2``; ``p_value``: of "the two rates are equal", two-sided."""

    k1: int
    n1: int
    k2: int
    n2: int
    p_value: float

    @property
    def rate1(self) -> float:
        return self.k1 / self.n1 if self.n1 else math.nan

    @property
    def rate2(self) -> float:
        return self.k2 / self.n2 if self.n2 else math.nan

    @property
    def difference(self) -> float:
        """rate2 - rate1."""
        return self.rate2 - self.rate1

    def higher(self, alpha: float) -> int | None:
        """1 or 2, the side whose rate is higher with confidence at ``alpha``; None when not shown."""
        if self.p_value >= alpha or self.rate1 == self.rate2:
            return None
        return 2 if self.rate2 > self.rate1 else 1


@functools.lru_cache(maxsize=1024)
def _boschloo(k1: int, n1: int, k2: int, n2: int) -> float:
    table = [[k1, k2], [n1 - k1, n2 - k2]]
    return float(stats.boschloo_exact(table, alternative="two-sided").pvalue)


def two_proportions(k1: int, n1: int, k2: int, n2: int) -> Proportions:
    """The exact two-sided test of k1/n1 = k2/n2. Nothing to compare (a side with no trials, or no
    event nor non-event at all) gives p = 1."""
    for k, n in ((k1, n1), (k2, n2)):
        if n < 0 or not 0 <= k <= n:
            raise ValueError(f"a proportion needs 0 <= k <= n, not {k} of {n}")
    if n1 == 0 or n2 == 0 or k1 + k2 == 0 or k1 + k2 == n1 + n2:
        return Proportions(k1, n1, k2, n2, 1.0)
    return Proportions(k1, n1, k2, n2, min(1.0, _boschloo(k1, n1, k2, n2)))
