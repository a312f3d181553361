"""A run's score on the evaluation set, with its interval, and whether one side scores lower than another.

The score is the share of items answered (Wilson's interval: it stays inside [0, 1] and keeps its level
for the few items of a set). Two sides answer the same items, so they are compared item by item: only
the items one side answers and the other does not carry information (McNemar's exact test, one-sided:
"lower with confidence" is a one-sided binomial tail over those discordant items).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from scipy.stats import binom

from strix_pipeline.stats.proportions import wilson_interval


@dataclass(frozen=True)
class QualityScore:
    passed: int
    items: int
    low: float
    high: float

    @property
    def share(self) -> float:
        return self.passed / self.items if self.items else math.nan

    def text(self) -> str:
        return f"{self.passed}/{self.items} ({self.low:.0%}–{self.high:.0%})"


def score(passed: int, items: int, level: float = 0.95) -> QualityScore:
    """``passed`` of ``items`` with Wilson's ``level`` interval."""
    if items <= 0:
        return QualityScore(passed, items, math.nan, math.nan)
    low, high = wilson_interval(passed, items, level)
    return QualityScore(passed, items, low, high)


@dataclass(frozen=True)
class QualityComparison:
    lost: list[str]  # items the baseline answers and the other side does not
    gained: list[str]  # the other way round
    p_value: float  # one-sided: the other side answers fewer items than the baseline
    lower: bool  # with confidence, at ``alpha``

    def text(self) -> str:
        counts = f"misses {len(self.lost)} the baseline answers, answers {len(self.gained)} it misses"
        if self.lower:
            return f"scores lower: {counts} (one-sided p={self.p_value:.3f})"
        return f"not lower with confidence: {counts}"


def compare(
    baseline: Mapping[str, bool], other: Mapping[str, bool], alpha: float = 0.05
) -> QualityComparison:
    """Does ``other`` answer fewer of the items both sides were asked than ``baseline``?"""
    common = sorted(set(baseline) & set(other))
    lost = [i for i in common if baseline[i] and not other[i]]
    gained = [i for i in common if other[i] and not baseline[i]]
    discordant = len(lost) + len(gained)
    # P(at least this many losses among the discordant items | each is a fair coin)
    p = float(binom.sf(len(lost) - 1, discordant, 0.5)) if discordant else 1.0
    return QualityComparison(lost, gained, p, p <= alpha)
