"""The fit: one plan per night, production stopped once for all of it, what does not fit deferred by name.

A night is one opening of the host's window. Production stops once at its start (``stop_s``), the
runs follow one after another in :func:`~strix_pipeline.planning.priority.rank` order, and production
starts again once after the last (``restart_s``: the restore's lead, its health wait and margin
included, :mod:`~strix_pipeline.planning.deadline`). Before each run the window is checked again
(:func:`~strix_pipeline.planning.window.check_fit`): the run must end by the restore's time, the
Box's own restore's and the run's deadline alike. A run that does not fit is deferred to the next
night by name; a shorter one after it may still fit (the window is filled, and the deferred run keeps
its rank, so it leads the next night). What no night of the week holds is next week's, one week older
(:func:`next_week`): after ``starve_weeks`` it goes first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from strix_pipeline.config import HostConfig
from strix_pipeline.planning.deadline import DEFAULT_RESTORE_LEAD_S, restore_lead_s
from strix_pipeline.planning.estimate import Estimate
from strix_pipeline.planning.priority import STARVE_WEEKS, rank
from strix_pipeline.planning.window import Fit, Window, check_fit, keeps_window, window_at

STOP_S = 60.0  # production's stop: a container's or a unit's, with its grace period


@dataclass(frozen=True)
class PlannedRun:
    """One run to place: its name (how the plan and the deferral name it), host and expected length."""

    name: str
    host: str
    estimate: Estimate
    priority: int = 0  # priority.run_priority
    canary: bool = False
    weeks_waited: int = 0  # weeks it has been deferred so far
    deferred_since: datetime | None = None  # an earlier night deferred it (by name) at this time


@dataclass(frozen=True)
class Slot:
    run: PlannedRun
    start: datetime
    end: datetime
    fit: Fit  # the window check made before it


@dataclass(frozen=True)
class Night:
    window: Window
    production_down: datetime | None  # the one stop of the night; None: nothing fit, production served
    production_up: datetime | None  # expected back (after restart_s)
    slots: tuple[Slot, ...]
    deferred: tuple[PlannedRun, ...]  # to the next night, by name, with why


@dataclass(frozen=True)
class WeekPlan:
    nights: tuple[Night, ...]
    left: tuple[PlannedRun, ...]  # no night of the week held them: next week's (next_week)


def ordered(runs: list[PlannedRun], starve_weeks: int = STARVE_WEEKS) -> list[PlannedRun]:
    """The runs in the order a night takes them (stable: equal ranks keep the order given)."""
    return sorted(
        runs,
        key=lambda r: rank(r.priority, r.canary, r.weeks_waited, starve_weeks, r.deferred_since is not None),
    )


def plan_night(
    runs: list[PlannedRun],
    window: Window,
    *,
    stop_s: float = STOP_S,
    restart_s: float = DEFAULT_RESTORE_LEAD_S,
    starve_weeks: int = STARVE_WEEKS,
) -> Night:
    """Lay ``runs`` into ``window``, production stopped once before the first and started after the last."""
    at = window.start + timedelta(seconds=stop_s)
    slots: list[Slot] = []
    deferred: list[PlannedRun] = []
    for run in ordered(runs, starve_weeks):
        fit = run_fit(run.estimate, window, at, restart_s)
        if not fit.fits:
            deferred.append(run)
            continue
        end = at + timedelta(seconds=run.estimate.seconds)
        slots.append(Slot(run, at, end, fit))
        at = end
    if not slots:
        return Night(window, None, None, (), tuple(deferred))
    up = slots[-1].end + timedelta(seconds=restart_s)
    return Night(window, window.start, up, tuple(slots), tuple(deferred))


def run_fit(est: Estimate, window: Window, at: datetime, restart_s: float = DEFAULT_RESTORE_LEAD_S) -> Fit:
    """Whether a run of ``est`` from ``at`` ends by the restore's time, ``restart_s`` before the end of
    ``window`` (0 on a host without production): the plan's check and the runner's before each run."""
    what = est.describe() + (
        f" + {restart_s / 60:.0f} min for production's restore (its health timeout and a margin)"
        if restart_s
        else ""
    )
    return check_fit(est.seconds + restart_s, what, window, at)


def admit_run(
    host: HostConfig,
    default_schedule: str,
    est: Estimate,
    now: datetime,
    timezone: str = "UTC",
    *,
    force: bool = False,
) -> Fit:
    """The one window rule before a run, for the night's admission and the runner alike: the window
    open at ``now``, and ``est`` ending by the restore's time (planning/deadline.py; the window's end
    on a host without production), the time the run is stopped at if it is still going
    (:func:`run_fit`). ``force``: a manual run, not checked; a host that keeps no window is not either."""
    if force:
        return Fit(True, est.seconds, math.inf, "forced: the window is not checked")
    if not keeps_window(host):
        return Fit(True, est.seconds, math.inf, "the host keeps no maintenance window")
    check = window_at(host, default_schedule, now, timezone)
    if not check.open or check.window is None:
        return Fit(False, est.seconds, 0.0, check.reason)
    return run_fit(est, check.window, now, restore_lead_s(host.production))


def plan_week(
    runs: list[PlannedRun],
    nights: list[Window],
    *,
    stop_s: float = STOP_S,
    restart_s: float = DEFAULT_RESTORE_LEAD_S,
    starve_weeks: int = STARVE_WEEKS,
) -> WeekPlan:
    """Night after night, each taking what the one before deferred, until the runs or the nights end."""
    out: list[Night] = []
    pending = list(runs)
    for window in nights:
        if not pending:
            break
        night = plan_night(pending, window, stop_s=stop_s, restart_s=restart_s, starve_weeks=starve_weeks)
        out.append(night)
        pending = deferred_from(night)
    return WeekPlan(tuple(out), tuple(pending))


def deferred_from(night: Night) -> list[PlannedRun]:
    """What ``night`` deferred, marked so (``deferred_since`` its window's start, kept if earlier): the
    next night takes these first after the decision's runs and the canary."""
    return [r if r.deferred_since else replace(r, deferred_since=night.window.start) for r in night.deferred]


def next_week(left: tuple[PlannedRun, ...]) -> list[PlannedRun]:
    """What a week left, one week older: each week waited is a step of priority (priority.rank)."""
    return [replace(r, weeks_waited=r.weeks_waited + 1) for r in left]


def pair_slot(comparison: str, host: str, extra_runs: int, sides: list[Estimate]) -> PlannedRun | None:
    """The slot for a comparison's extra paired runs (stats/paired.py's ladder: 3 -> 5 -> 10 pairs),
    ``extra_runs`` runs as long as its sides' mean; None with no extra run (the default until the
    paired-comparison runner exists). It is the decision's, so it ranks with the first runs."""
    if extra_runs <= 0 or not sides:
        return None
    mean = sum(s.seconds for s in sides) / len(sides)
    est = Estimate(extra_runs * mean, f"{extra_runs} paired run(s) of ~{mean / 60:.0f} min")
    return PlannedRun(f"pairs for {comparison}", host, est, priority=1)
