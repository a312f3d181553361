"""The search for the first release that shows a change: a binary search decided by intervals.

Pure: no warehouse, no engine. A change confirmed between two benchmarked versions (the brackets:
``before`` without the change, ``after`` with it) has ``n`` releases between them that were never
benchmarked. Each step benchmarks the release nearest the middle of the range still open and puts it
on a side by its metric's interval against the two brackets':

- it overlaps one bracket's interval only: that side;
- it overlaps both: **inconclusive**, and the search stops there saying so (the change is smaller
  than the noise of one run, so no further step could be trusted either);
- it overlaps neither: the side whose figure is nearer (a gradual change, or a second one; the
  step's note says so).

A release that could not be measured (failed to start, not comparable) is skipped, as `git bisect
skip` does, and the search goes on around it. With ``n`` releases the search needs at most
``ceil(log2(n + 1))`` runs (<= ceil(log2 n) + 1), and never more than ``max_runs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Side = Literal["before", "after", "inconclusive", "skipped"]


@dataclass(frozen=True)
class Figure:
    """One release's figure on the metric with its interval (``low <= value <= high``)."""

    version: str
    value: float
    low: float
    high: float
    run_id: str | None = None

    def overlaps(self, other: Figure) -> bool:
        return self.low <= other.high and other.low <= self.high


def side_of(mid: Figure, before: Figure, after: Figure) -> tuple[Side, str]:
    """Which bracket ``mid`` resembles, and why in words."""
    with_before, with_after = mid.overlaps(before), mid.overlaps(after)
    if with_before and with_after:
        return (
            "inconclusive",
            f"{mid.version}'s interval overlaps both {before.version}'s and {after.version}'s",
        )
    if with_before:
        return "before", f"overlaps {before.version}'s interval only"
    if with_after:
        return "after", f"overlaps {after.version}'s interval only"
    nearer: Side = "before" if abs(mid.value - before.value) < abs(mid.value - after.value) else "after"
    return nearer, (
        f"overlaps neither bracket; nearer {before.version if nearer == 'before' else after.version} "
        "(a gradual change, or a second one)"
    )


def runs_bound(n: int) -> int:
    """The most runs a search over ``n`` releases needs: ceil(log2(n + 1))."""
    return math.ceil(math.log2(n + 1)) if n > 0 else 0


@dataclass
class Search:
    """The open range over ``n`` candidates (in version order). The first release that shows the
    change has index in ``[lo, hi]``, where ``hi == n`` stands for the ``after`` bracket itself."""

    n: int
    lo: int = 0
    hi: int = -1  # set to n
    skipped: set[int] = field(default_factory=set)
    stopped: str | None = None  # why the search ended before the range closed

    def __post_init__(self) -> None:
        if self.hi < 0:
            self.hi = self.n

    def next_index(self) -> int | None:
        """The candidate to benchmark next: the one nearest the middle of the open range that was
        not skipped; None when the range is closed, the search stopped, or every one left was skipped."""
        if self.stopped or self.lo >= self.hi:
            return None
        middle = (self.lo + self.hi) // 2
        open_ = [i for i in range(self.lo, self.hi) if i not in self.skipped]
        return min(open_, key=lambda i: (abs(i - middle), i)) if open_ else None

    def record(self, index: int, side: Side, why: str = "") -> None:
        if side == "before":
            self.lo = index + 1
        elif side == "after":
            self.hi = index
        elif side == "skipped":
            self.skipped.add(index)
        else:
            self.stopped = why or "inconclusive"

    @property
    def found(self) -> bool:
        return self.stopped is None and self.lo >= self.hi

    def first_index(self) -> int:
        """The first release showing the change (``n``: the after bracket), once ``found``."""
        return self.hi


# ---- the Pinpoint search: each midpoint compared by pairs with both brackets ------------------------

Verdict = Literal[
    "different", "same", "unknown"
]  # a comparison's verdict; "inconclusive at budget" is unknown


def pair_side(vs_before: Verdict, vs_after: Verdict) -> tuple[Side, str]:
    """Which side a midpoint falls on from its comparisons by pairs with the two brackets.

    *same* as one bracket and *different* from the other is that bracket's side. *Different* from
    ``before`` puts the first change at or before the midpoint even when it also differs from
    ``after`` (a gradual change, or a second one: the note says so). One *unknown* verdict lets the
    other decide; *same* as both, or two *unknown*, cannot place it: the search stops inconclusive
    (the brackets' step is below the target, or the noise beyond the budget of pairs)."""
    if vs_before == "different":
        if vs_after == "different":
            return (
                "after",
                "different from both brackets: the change begins at or before it (a gradual "
                "change, or a second one)",
            )
        return "after", f"different from the release without the change, {vs_after} against the one with it"
    if vs_before == "same":
        if vs_after == "same":
            return "inconclusive", "same as both brackets: the brackets' step is below the target"
        return "before", f"same as the release without the change, {vs_after} against the one with it"
    if vs_after == "different":
        return "before", "unknown against the release without the change, different from the one with it"
    if vs_after == "same":
        return "after", "unknown against the release without the change, same as the one with it"
    return "inconclusive", "unknown against both brackets at the budget of pairs"
