"""A host's maintenance window as values: whether it is open, and whether the next run fits in it.

Both checks return a value and never raise for "closed" or "does not fit": the sensor, the plan and
`strix plan --week` read the value; the runner (hosts/box/production.py, runner/docker_run.py) turns a
refusal into its ``failed_guard`` or ``deferred`` status. One rule each, defined here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeGuard
from zoneinfo import ZoneInfo

from strix_pipeline.config import DockerHostConfig, HostConfig
from strix_pipeline.planning.cron import fires_between, window_start


@dataclass(frozen=True)
class Window:
    """One opening of a host's window: from a fire time of its cron for its hours (elapsed)."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class WindowCheck:
    """Whether ``host``'s window is open at ``at``; ``window`` is the open one, ``reason`` says why not."""

    open: bool
    window: Window | None
    reason: str


@dataclass(frozen=True)
class Fit:
    """Whether a run of ``needed_s`` fits what is left of ``window`` at ``at``, and why (or why not)."""

    fits: bool
    needed_s: float
    left_s: float
    reason: str


def window_expr(host: DockerHostConfig, default_schedule: str) -> str:
    """The cron the host's window opens at: its own ``maintenance_window``, else the schedule."""
    return host.maintenance_window or default_schedule


def keeps_window(host: HostConfig) -> TypeGuard[DockerHostConfig]:
    """Whether runs on ``host`` keep to its maintenance window: a Docker host's do (the Box's users are
    served outside it); the local host has none (nobody is served from it)."""
    return isinstance(host, DockerHostConfig)


def window_at(
    host: DockerHostConfig, default_schedule: str, at: datetime, timezone: str = "UTC"
) -> WindowCheck:
    """The window open at ``at`` (aware), or why none is."""
    expr = window_expr(host, default_schedule)
    local = at.astimezone(ZoneInfo(timezone))
    start = window_start(expr, host.maintenance_window_hours, local, timezone)
    if start is None:
        return WindowCheck(
            False,
            None,
            f"outside the maintenance window ({expr!r} + {host.maintenance_window_hours:g} h, {timezone}) "
            f"at {local:%Y-%m-%d %H:%M}",
        )
    end = start + timedelta(hours=host.maintenance_window_hours)
    return WindowCheck(True, Window(start, end), f"inside the window until {end:%Y-%m-%d %H:%M %Z}")


def night_of(host: HostConfig, default_schedule: str, at: datetime, timezone: str = "UTC") -> str | None:
    """The night a run launched at ``at`` belongs to: the open window's start (``2026-12-07T03:00``
    in the configured zone), the name the weekly schedule and the sensor tag runs with, so that one
    night's runs stop production once between them. None: no window open (or none kept)."""
    if not keeps_window(host):
        return None
    check = window_at(host, default_schedule, at, timezone)
    return f"{check.window.start:%Y-%m-%dT%H:%M}" if check.window else None


def windows(
    host: DockerHostConfig, default_schedule: str, after: datetime, until: datetime, timezone: str = "UTC"
) -> list[Window]:
    """The host's windows opening in [after, until): the nights a plan of several lays its runs into."""
    hours = timedelta(hours=host.maintenance_window_hours)
    expr = window_expr(host, default_schedule)
    return [Window(s, s + hours) for s in fires_between(expr, after, until, timezone)]


def check_fit(needed_s: float, what: str, window: Window, at: datetime) -> Fit:
    """Whether ``needed_s`` seconds from ``at`` end inside ``window``: re-checked before each run."""
    left = (window.end - at).total_seconds()
    if needed_s > left:
        return Fit(
            False,
            needed_s,
            left,
            f"estimated {what}, the window has {max(left, 0) / 60:.0f} min left (until "
            f"{window.end:%Y-%m-%d %H:%M %Z}): deferred to the next window",
        )
    return Fit(True, needed_s, left, f"estimated {what}, {left / 60:.0f} min left in the window")
