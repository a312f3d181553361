"""What a comparison by pairs can resolve on this machine, said before it runs.

From a metric's measured noise (the coefficient of variation of one run, as the weekly analysis keeps
it per series in table ``noise_figures``) and the step a comparison chases: how many pairs the ladder
needs to resolve that step, and whether the configured cap (``[analysis] compare_max_pairs``) gets
there -- if not, the smallest step it can resolve at the cap. Resolving a step means the ladder's last
look detects it with 80 % power at the part of alpha that look spends (stats/paired.detectable_step
with look_alphas), the same figure the noise table's "step 3 / 5 / 10 pairs" columns give for a look
at the whole alpha. The caps tried climb the way the ladder does (3, 5, 10, then doubling, as
Pinpoint climbs 10 -> 160); a cap just past a ladder step spends almost nothing at its last look, so
counting one pair at a time would name caps that resolve less than the ladder step below them. The
weekly figure spans weeks, so it carries the host's drift between them that pairs run back to back
cancel: the counts lean to the safe side.

Pure: numbers in, a :class:`Resolution` out; `strix plan` and `strix compare` print its line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from strix_pipeline.stats import paired

# the most pairs considered: a step that needs more is "more than" this, which no budget here buys
MOST_PAIRS = 640
# below this many runs a CV is itself uncertain by a third or more (analysis/floor.MIN_FIGURE_RUNS)
ROUGH_BELOW_RUNS = 6


def ladder_step(cv: float, cap: int, ladder: tuple[int, ...] = paired.LADDER) -> float:
    """The smallest step (0.05: 5 %) a ladder capped at ``cap`` pairs resolves at noise ``cv``: its last
    look's detectable step at the alpha that look spends."""
    looks = paired.looks_of(ladder, cap)
    return paired.detectable_step(cv, cap, alpha=paired.look_alphas(looks)[-1])


def ladder_caps(ladder: tuple[int, ...] = paired.LADDER, most: int = MOST_PAIRS) -> tuple[int, ...]:
    """The caps a budget is counted in: the ladder's steps, then doubling its last (10, 20, 40 ...)."""
    return paired.looks_of(ladder, most)


def pairs_needed(cv: float, target: float, ladder: tuple[int, ...] = paired.LADDER) -> int | None:
    """The fewest pairs (a cap on :func:`ladder_caps`) whose ladder resolves ``target``; None: more
    than :data:`MOST_PAIRS`."""
    return next((n for n in ladder_caps(ladder) if ladder_step(cv, n, ladder) <= target), None)


@dataclass(frozen=True)
class Resolution:
    """One metric's answer: what ``target`` needs at noise ``cv`` and what ``cap`` pairs resolve."""

    metric: str
    series: str  # where the noise was measured ("decode@1"), in words
    cv: float
    runs: int  # the runs behind the CV
    target: float
    cap: int
    needed: int | None  # pairs; None: more than MOST_PAIRS
    step_at_cap: float

    @property
    def resolves(self) -> bool:
        return self.step_at_cap <= self.target

    def text(self) -> str:
        rough = f", rough: {self.runs} runs" if self.runs < ROUGH_BELOW_RUNS else f" from {self.runs} runs"
        head = f"{self.metric} (CV {self.cv:.1%}{rough}, {self.series}): ±{self.target:.0%} needs "
        head += f"{self.needed} pairs" if self.needed else f"more than {MOST_PAIRS} pairs"
        if self.resolves:
            return f"{head}; the cap of {self.cap} resolves it"
        step = f"±{self.step_at_cap:.1%}" if math.isfinite(self.step_at_cap) else "none"
        return f"{head}; the cap of {self.cap} cannot: the smallest step it resolves here is {step}"


def resolution(metric: str, series: str, cv: float, runs: int, target: float, cap: int) -> Resolution:
    """What ``cap`` pairs resolve of ``target`` at noise ``cv`` (measured over ``runs`` runs)."""
    if not 0 < target < 1:
        raise ValueError(f"a target is a relative step in (0, 1), not {target}")
    return Resolution(metric, series, cv, runs, target, cap, pairs_needed(cv, target), ladder_step(cv, cap))


class MeasuredNoise(Protocol):
    """What a stored noise figure (warehouse.noise.NoiseRecord) gives this module."""

    host: str
    engine: str
    scenario: str
    level: int
    metric: str
    cv: float
    runs: int


def figure_for(
    figures: Sequence[MeasuredNoise], host: str, engine: str, metric: str, level: int
) -> MeasuredNoise | None:
    """The figure of ``metric`` on ``host`` and ``engine`` whose level is nearest ``level`` (the
    comparison's: one client, its prompt length); between two as near, the noisier."""
    mine = [f for f in figures if (f.host, f.engine, f.metric) == (host, engine, metric) and f.cv > 0]
    return min(mine, key=lambda f: (abs(f.level - level), -f.cv), default=None)


def resolution_lines(
    figures: Sequence[MeasuredNoise],
    host: str,
    engine: str,
    targets: Mapping[str, float],
    cap: int,
    levels: Mapping[str, int],
) -> list[str]:
    """One line per metric of ``targets`` (metric -> the step chased): what it needs and whether
    ``cap`` pairs resolve it, from the figure nearest its level in ``levels`` (default 1)."""
    out, unmeasured = [], []
    for metric, target in targets.items():
        f = figure_for(figures, host, engine, metric, levels.get(metric, 1))
        if f is None:
            unmeasured.append(metric)
            continue
        r = resolution(metric, f"{f.scenario}@{f.level}", f.cv, f.runs, target, cap)
        out.append(r.text())
    if unmeasured:
        out.append(
            f"no noise figure for {', '.join(unmeasured)} here (figures are kept for the weekly series' "
            "metrics, from the canary's runs)"
        )
    return out
