"""When a host's maintenance window is open: the fire times of a cron expression, as Dagster reads it.

The window opens at each fire time of a 5-field cron expression (by default the weekly schedule's
own) in the project's timezone and stays open for a number of *elapsed* hours. The fields are read
by croniter, the parser Dagster's schedules use (Dagster ships its own copy of it); the wall-clock
times croniter yields are placed on the timeline with the rules Dagster applies to a schedule's
ticks across a daylight-saving change (``dagster._utils.schedules``):

- a fire time that does not exist (the hour skipped in spring) fires when the gap ends, e.g.
  02:30 on the last Sunday of March in Europe/Berlin fires at 03:00 CEST; an expression that fires
  every hour (``*`` in the hour field) skips it instead;
- a fire time that happens twice (the hour repeated in autumn) fires once, at its second
  occurrence; an expression that fires every hour fires at both.

No Dagster import: the benchmark (inside the asset), the new-image sensor and `strix plan --week` all
call this (the last through :func:`fires_between`, the same rules read forwards). What makes
an expression valid is the config's rule (``config.validate_cron``), used here too.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from strix_pipeline.config import validate_cron

# Farther apart than the wall clock and the timeline can disagree (a DST shift is an hour, at most two).
_SHIFT = timedelta(hours=3)


def _exists(wall: datetime) -> bool:
    return wall.astimezone(UTC).astimezone(wall.tzinfo).replace(tzinfo=None) == wall.replace(tzinfo=None)


def _ambiguous(wall: datetime) -> bool:
    return wall.replace(fold=0).utcoffset() != wall.replace(fold=1).utcoffset()


def _gap_end(wall: datetime) -> datetime:
    """The first wall-clock minute after a skipped one that exists: when the gap ends."""
    t = wall.replace(second=0, microsecond=0)
    while not _exists(t):
        t += timedelta(minutes=1)  # same tzinfo: wall-clock arithmetic, which is what is wanted here
    return t


def _instants(naive: datetime, tz: ZoneInfo, every_hour: bool) -> list[datetime]:
    """Where one wall-clock fire time lands on the timeline (none, one or two instants)."""
    wall = naive.replace(tzinfo=tz)
    if not _exists(wall):
        return [] if every_hour else [_gap_end(wall)]
    if _ambiguous(wall):
        return [wall.replace(fold=0), wall.replace(fold=1)] if every_hour else [wall.replace(fold=1)]
    return [wall]


def _fires_backwards(expr: str, tz: ZoneInfo, now: datetime) -> Iterator[tuple[datetime, datetime]]:
    """(wall-clock time, instant) of each fire time, the wall-clock times newest first from a little
    after ``now`` (the instants are only nearly in order: a DST change reorders them by its shift)."""
    start = now.astimezone(tz).replace(tzinfo=None) + _SHIFT
    it = croniter(validate_cron(expr), start)
    every_hour = croniter.expand(expr)[0][1] == ["*"]
    while True:
        naive = it.get_prev(datetime)
        for instant in _instants(naive, tz, every_hour):
            yield naive, instant


def last_fire_time(expr: str, now: datetime, timezone: str = "UTC", *, within: timedelta) -> datetime | None:
    """The latest fire time of ``expr`` at or before ``now`` if it is less than ``within`` ago, else None.

    The result is an aware datetime in ``timezone``; ``now`` must be aware.
    """
    tz = ZoneInfo(timezone)
    now = now.astimezone(tz)
    # On the timeline as timestamps: aware datetimes sharing a tzinfo compare by wall clock.
    at = now.timestamp()
    oldest = now.replace(tzinfo=None) - within - _SHIFT
    best: datetime | None = None
    for naive, instant in _fires_backwards(expr, tz, now):
        if instant.timestamp() <= at and (best is None or instant.timestamp() > best.timestamp()):
            best = instant
        # past every wall-clock time that could still be the latest one, or past the window
        settled = best is not None and naive < best.replace(tzinfo=None) - _SHIFT
        if settled or naive < oldest:
            break
    if best is None or at - best.timestamp() >= within.total_seconds():
        return None
    return best


def window_start(expr: str, hours: float, now: datetime, timezone: str = "UTC") -> datetime | None:
    """The start of the window open at ``now`` (a fire time less than ``hours`` elapsed hours ago), or
    None."""
    return last_fire_time(expr, now, timezone, within=timedelta(hours=hours))


def fires_between(expr: str, after: datetime, until: datetime, timezone: str = "UTC") -> list[datetime]:
    """Every fire time of ``expr`` at or after ``after`` and before ``until``, in order, as aware
    datetimes in ``timezone`` -- the windows a plan of several nights lays its runs into."""
    tz = ZoneInfo(timezone)
    begin, end = after.timestamp(), until.timestamp()
    it = croniter(validate_cron(expr), after.astimezone(tz).replace(tzinfo=None) - _SHIFT)
    every_hour = croniter.expand(expr)[0][1] == ["*"]
    out: list[datetime] = []
    while True:
        naive = it.get_next(datetime)
        if naive - _SHIFT > until.astimezone(tz).replace(tzinfo=None):
            break
        out += [i for i in _instants(naive, tz, every_hour) if begin <= i.timestamp() < end]
    return sorted(set(out), key=lambda d: d.timestamp())
