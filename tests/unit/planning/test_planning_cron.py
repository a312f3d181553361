"""The maintenance window follows the schedule's own cron semantics, across daylight-saving changes.

In Europe/Berlin in 2026 summer time starts on Sunday 29 March (02:00 CET -> 03:00 CEST, at 01:00 UTC)
and ends on Sunday 25 October (03:00 CEST -> 02:00 CET, at 01:00 UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.hosts.box.production import check_maintenance_window
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning import cron as window

BERLIN = "Europe/Berlin"
TZ = ZoneInfo(BERLIN)
SPRING = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # the change to summer time
AUTUMN = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)  # the change back


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _open_at(expr: str, hours: float, now: datetime, tz: str = BERLIN) -> datetime | None:
    host = DockerHostConfig(
        kind="docker", docker_host="unix:///x.sock", maintenance_window=expr, maintenance_window_hours=hours
    )
    try:
        return check_maintenance_window(host, "0 3 * * 1", now=now, timezone=tz)
    except EngineStartError:
        return None


def test_weekly_schedule_window_opens_at_local_wall_clock_time_on_both_sides_of_each_change() -> None:
    """Monday 03:00 Berlin: 02:00 UTC in winter, 01:00 UTC in summer -- never an hour off."""
    for monday_utc, offset_h in [
        (_utc(2026, 3, 23, 2, 0), 1),  # the Monday before summer time
        (_utc(2026, 3, 30, 1, 0), 2),  # the Monday after
        (_utc(2026, 10, 19, 1, 0), 2),  # the Monday before winter time
        (_utc(2026, 10, 26, 2, 0), 1),  # the Monday after
    ]:
        start = _open_at("0 3 * * 1", 6, monday_utc)
        assert start is not None, monday_utc
        assert (start.hour, start.minute, start.utcoffset()) == (3, 0, timedelta(hours=offset_h))
        assert start.timestamp() == monday_utc.timestamp()
        assert _open_at("0 3 * * 1", 6, monday_utc - timedelta(minutes=1)) is None  # not an hour early
        # open for six elapsed hours, then closed
        assert _open_at("0 3 * * 1", 6, monday_utc + timedelta(hours=6, minutes=-1)) == start
        assert _open_at("0 3 * * 1", 6, monday_utc + timedelta(hours=6)) is None


def test_window_over_the_spring_change_lasts_its_elapsed_hours() -> None:
    """Opens Sunday 01:00 CET (00:00 UTC); six hours later it is 08:00 CEST, not 07:00."""
    start = _open_at("0 1 * * 0", 6, _utc(2026, 3, 29, 0, 0))
    assert start == datetime(2026, 3, 29, 1, 0, tzinfo=TZ) and start.utcoffset() == timedelta(hours=1)
    assert _open_at("0 1 * * 0", 6, _utc(2026, 3, 29, 5, 30)) == start  # 07:30 CEST: still open
    assert _open_at("0 1 * * 0", 6, _utc(2026, 3, 29, 6, 0)) is None  # 08:00 CEST: six hours have passed


def test_window_over_the_autumn_change_lasts_its_elapsed_hours() -> None:
    """Opens Sunday 01:00 CEST (23:00 UTC Saturday); six hours later it is 06:00 CET, not 07:00."""
    start = _open_at("0 1 * * 0", 6, _utc(2026, 10, 24, 23, 0))
    assert start is not None and start.utcoffset() == timedelta(hours=2)
    assert _open_at("0 1 * * 0", 6, _utc(2026, 10, 25, 4, 59)) == start  # 05:59 CET
    assert _open_at("0 1 * * 0", 6, _utc(2026, 10, 25, 5, 0)) is None  # 06:00 CET


def test_a_skipped_fire_time_fires_when_the_gap_ends() -> None:
    """02:30 does not exist on 29 March in Berlin: the window opens at 03:00 CEST, as the schedule fires."""
    assert _open_at("30 2 * * 0", 1, SPRING - timedelta(minutes=1)) is None
    start = _open_at("30 2 * * 0", 1, SPRING)
    assert start is not None and (start.hour, start.minute, start.utcoffset()) == (3, 0, timedelta(hours=2))
    assert _open_at("30 2 * * 0", 1, SPRING + timedelta(minutes=59)) == start
    assert _open_at("30 2 * * 0", 1, SPRING + timedelta(hours=1)) is None


def test_a_repeated_fire_time_fires_once_at_its_second_occurrence() -> None:
    """02:30 happens twice on 25 October in Berlin: the window opens at 02:30 CET, not 02:30 CEST."""
    first, second = AUTUMN - timedelta(minutes=30), AUTUMN + timedelta(minutes=30)
    assert _open_at("30 2 * * 0", 1, first) is None
    assert _open_at("30 2 * * 0", 1, first + timedelta(minutes=20)) is None
    start = _open_at("30 2 * * 0", 1, second)
    assert start is not None and (start.hour, start.minute, start.utcoffset()) == (2, 30, timedelta(hours=1))


def _dagster_ticks(expr: str, tz: str, start: datetime, end: datetime) -> list[float]:
    """When Dagster's scheduler would fire ``expr`` in ``tz`` (the iterator its schedules tick by)."""
    from dagster._utils.schedules import cron_string_iterator

    out = []
    for t in cron_string_iterator(start.timestamp(), expr, tz):
        if t.timestamp() >= end.timestamp():
            return out
        out.append(t.timestamp())
    return out


@pytest.mark.parametrize("tz", [BERLIN, "America/New_York"])
@pytest.mark.parametrize(
    "expr",
    ["0 3 * * 1", "30 2 * * *", "0 2 * * 0", "15 1 * * *", "30 * * * *", "*/20 2 * * *", "0 1-3 * * *"],
)
def test_window_opens_exactly_when_the_dagster_schedule_fires(expr: str, tz: str) -> None:
    """Minute by minute around both changes of the year, a window opens exactly at Dagster's ticks."""
    zone = ZoneInfo(tz)
    for day in (datetime(2026, 3, 8), datetime(2026, 3, 29), datetime(2026, 10, 25), datetime(2026, 11, 1)):
        # stepped in UTC: aware arithmetic in the zone itself would step by wall clock
        start = day.replace(tzinfo=zone).astimezone(UTC) - timedelta(hours=1)
        end = start + timedelta(hours=6)
        ticks = _dagster_ticks(expr, tz, start, end)
        opened = []
        t = start
        while t < end:
            s = window.last_fire_time(expr, t, tz, within=timedelta(minutes=1))
            if s is not None:
                assert s.timestamp() == t.timestamp(), (expr, tz, t)
                opened.append(s.timestamp())
            t += timedelta(minutes=1)
        assert opened == ticks, (expr, tz, day)
