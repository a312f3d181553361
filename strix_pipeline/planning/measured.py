"""The one account of what is measured, read by the new-image sensor and the weekly schedule alike.

The account is the warehouse's ``ok`` runs, one row per (host, engine, image digest, model profile)
with the latest such run's start (``warehouse.past_runs.measured_runs`` reads it). The warehouse and not the
Dagster instance's materializations: `strix run`, a backfill, a history and a bisection all load
their runs there, one materialization covers every model profile of a partition and a run that was
deferred or failed materializes too -- only the warehouse says which target measured its suite.

- the sensor benchmarks each digest once: :func:`measured` with no ``since`` (ever measured);
- the schedule benchmarks every week: ``since`` the week's start (:func:`week_start`, the schedule's
  latest fire time), so a run already measured this week is not requested again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from strix_pipeline.planning.cron import last_fire_time

WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Measured:
    """One target measured: a model profile of an engine image on a host."""

    host: str
    engine: str
    digest: str
    model: str


@dataclass(frozen=True)
class MeasuredRun:
    """A row of the account: a target and when its latest ``ok`` run started."""

    host: str
    engine: str
    digest: str
    model: str
    at: datetime


def measured(rows: list[MeasuredRun], since: datetime | None = None) -> frozenset[Measured]:
    """The targets with an ``ok`` run (started at or after ``since`` when given)."""
    return frozenset(
        Measured(r.host, r.engine, r.digest, r.model) for r in rows if since is None or r.at >= since
    )


def week_start(schedule: str, now: datetime, timezone: str = "UTC") -> datetime:
    """The start of the week ``now`` is in: the weekly schedule's latest fire time at or before it
    (a week ago when the schedule fires less often than weekly)."""
    return last_fire_time(schedule, now, timezone, within=WEEK) or now - WEEK


@dataclass(frozen=True)
class DeferredRun:
    """A row of the account's other half: a target deferred by name and not measured since, when it
    was first deferred and how many times (``warehouse.past_runs.deferred_runs`` reads it)."""

    host: str
    engine: str
    digest: str
    model: str
    first: datetime
    times: int

    @property
    def target(self) -> Measured:
        return Measured(self.host, self.engine, self.digest, self.model)


def deferrals(rows: list[DeferredRun]) -> dict[str, int]:
    """Per image digest, how many of its runs were deferred and not measured since: a digest whose
    count grew since the sensor requested it is due again (the schedule's weekly ask sees it too)."""
    out: dict[str, int] = {}
    for r in rows:
        out[r.digest] = out.get(r.digest, 0) + r.times
    return out


def deferral_ages(
    rows: list[DeferredRun], now: datetime
) -> tuple[dict[Measured, datetime], dict[Measured, int]]:
    """When each deferred target was first deferred by name, and how many whole weeks it has waited
    -- what the next night's order (planning.priority.rank) reads."""
    since = {r.target: r.first for r in rows}
    weeks = {k: max(0, int((now - at).total_seconds() // WEEK.total_seconds())) for k, at in since.items()}
    return since, weeks
