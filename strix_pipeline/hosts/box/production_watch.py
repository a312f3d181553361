"""The production watch: each Box's production checked outside runs, an alert when it has been down
longer than its grace period, and another when it comes back.

Between runs nothing else looks at production: a dead controller plus a failed restore on the Box would
go unseen until the next night's marker check. The watch is a state machine per host, kept by its
caller between checks (the Dagster sensor's cursor: :meth:`WatchState.dump` / :meth:`WatchState.read`):

- **up**: the health URL answers 200; a host that had been reported down is reported back (when, and
  for how long it was down);
- **down since**: the first check that found it not answering; nothing is sent within
  ``production.watch_grace_s`` (a restart, a model reload);
- **alerted**: down longer than the grace, said once, until it is back;
- **skipped**: a run holds the Box -- its guard's marker says production is stopped or held for a night
  and its planned outage is not over (hosts/box/marker.py), or the caller knows a run is in progress
  on it. A run's guard alerts on its own restore; a down production not yet reported is forgotten (the
  run restores it or says so), one already reported stays reported until it is back.

A marker whose planned outage is over, or one that says production was not restored, does not hold the
Box: that is what the watch is for. Plain code, no Dagster: the sensor is a thin caller.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from strix_pipeline.config import ProductionEngine
from strix_pipeline.hosts.box.marker import HELD_FOR_NIGHT, read_marker, when

UP, DOWN, ALERTED, SKIPPED = "up", "down", "alerted", "skipped"


@dataclass(frozen=True)
class WatchState:
    """What the watch remembers of one host between checks."""

    down_since: datetime | None = None  # the first check that found production not answering
    alerted_at: datetime | None = None  # when its being down was reported (None: not reported)

    def as_dict(self) -> dict:
        return {
            "down_since": self.down_since.isoformat() if self.down_since else None,
            "alerted_at": self.alerted_at.isoformat() if self.alerted_at else None,
        }

    @classmethod
    def from_dict(cls, data: object) -> WatchState:
        if not isinstance(data, dict):
            return cls()
        return cls(when(data.get("down_since")), when(data.get("alerted_at")))

    @staticmethod
    def dump(states: dict[str, WatchState]) -> str:
        return json.dumps({host: s.as_dict() for host, s in sorted(states.items())})

    @staticmethod
    def read(text: str | None) -> dict[str, WatchState]:
        """The states a cursor holds; an unreadable cursor starts the watch afresh."""
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            data = {}
        return {h: WatchState.from_dict(v) for h, v in data.items()} if isinstance(data, dict) else {}


@dataclass(frozen=True)
class WatchStep:
    """One check's outcome: the host's new state, what it is, the line to log, the alert to send."""

    state: WatchState
    status: str  # UP | DOWN | ALERTED | SKIPPED
    line: str
    alert: str | None = None


def _span(delta: timedelta) -> str:
    if delta.total_seconds() < 60:  # a grace of seconds (a test's, an impatient owner's) is not "0 min"
        return f"{int(delta.total_seconds())} s"
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def step(
    host: str,
    state: WatchState,
    *,
    healthy: bool | None,
    now: datetime,
    grace_s: float,
    url: str,
    held: str | None = None,
) -> WatchStep:
    """The next state of ``host`` from one check. ``held``: why a run holds the Box (then ``healthy`` is
    not asked for and may be None)."""
    if held is not None:
        kept = state if state.alerted_at is not None else WatchState()
        return WatchStep(kept, SKIPPED, f"{host}: not checked, {held}")
    if healthy:
        if state.alerted_at is not None and state.down_since is not None:
            text = (
                f"production on host {host} is back: {url} answers again at {now:%Y-%m-%d %H:%M:%S} UTC, "
                f"down since {state.down_since:%Y-%m-%d %H:%M:%S} UTC ({_span(now - state.down_since)})"
            )
            return WatchStep(WatchState(), UP, text, alert=text)
        after = f" (back within its grace, down {_span(now - state.down_since)})" if state.down_since else ""
        return WatchStep(WatchState(), UP, f"{host}: production healthy{after}")
    since = state.down_since or now
    down_for = now - since
    if state.alerted_at is not None:
        return WatchStep(
            WatchState(since, state.alerted_at),
            ALERTED,
            f"{host}: production still down ({_span(down_for)}, reported at {state.alerted_at:%H:%M:%S} UTC)",
        )
    if down_for.total_seconds() >= grace_s:
        text = (
            f"production on host {host} has been down for {_span(down_for)} outside any run: {url} has not "
            f"answered 200 since {since:%Y-%m-%d %H:%M:%S} UTC (grace {_span(timedelta(seconds=grace_s))}); "
            "no run holds the Box -- start production by hand or check the Box's restore"
        )
        return WatchStep(WatchState(since, now), ALERTED, text, alert=text)
    return WatchStep(
        WatchState(since, None),
        DOWN,
        f"{host}: production not answering {url} for {_span(down_for)} "
        f"(alert after {_span(timedelta(seconds=grace_s))})",
    )


def held_by_run(state_dir: str | Path, host: str, now: datetime) -> str | None:
    """Why a run holds ``host``'s production down now (its marker, its planned outage not over), or None."""
    info = read_marker(state_dir, host)
    if not info or info.get("state") not in ("stopped", HELD_FOR_NIGHT):
        return None
    restore_by = when(info.get("restore_by"))
    if restore_by is None or now >= restore_by:
        return None  # the outage was planned to end: a production still down is the watch's business
    what = "held for the night" if info.get("state") == HELD_FOR_NIGHT else "stopped"
    return f"run {info.get('run_id') or '?'} has production {what} until {restore_by:%H:%M:%S} UTC"


def watch(
    productions: dict[str, ProductionEngine],
    states: dict[str, WatchState],
    *,
    now: datetime,
    state_dir: str | Path,
    healthy: Callable[[str], bool],
    running: Callable[[str], str | None] = lambda host: None,
) -> dict[str, WatchStep]:
    """One check of every Box's production: ``healthy(url)`` asks the health URL, ``running(host)`` says
    why a run in progress holds the host (None: none)."""
    out = {}
    for host, p in sorted(productions.items()):
        held = running(host) or held_by_run(state_dir, host, now)
        out[host] = step(
            host,
            states.get(host, WatchState()),
            healthy=None if held else healthy(p.health_url),
            now=now,
            grace_s=p.watch_grace_s,
            url=p.health_url,
            held=held,
        )
    return out
