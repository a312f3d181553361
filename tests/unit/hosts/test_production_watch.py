"""The production watch outside runs: a real health URL on loopback stopped and started again, the
watch driven by a fake clock -- nothing within the grace, one alert after it, one when production is
back (with when and for how long) -- and no check while a run's marker holds the Box."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.production_health import ProductionHealth

from strix_pipeline.config import ProductionEngine
from strix_pipeline.hosts.box.marker import HELD_FOR_NIGHT, marker_path
from strix_pipeline.hosts.box.production import http_healthy
from strix_pipeline.hosts.box.production_watch import (
    ALERTED,
    DOWN,
    SKIPPED,
    UP,
    WatchState,
    held_by_run,
    step,
    watch,
)

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


@pytest.fixture
def health() -> Iterator[ProductionHealth]:
    server = ProductionHealth()
    yield server
    server.stop()


def production(url: str, grace_s: int = 600) -> ProductionEngine:
    return ProductionEngine(container="llama-prod", health_url=url, watch_grace_s=grace_s)


def test_production_stopped_and_started_on_loopback_alerts_after_the_grace_and_when_back(
    health: ProductionHealth, tmp_path: Path
) -> None:
    boxes = {"box": production(health.url)}
    states: dict[str, WatchState] = {}
    sent: list[str] = []

    def check(at: datetime) -> str:
        # the cursor's round trip each tick, as the sensor keeps it
        steps = watch(boxes, states, now=at, state_dir=tmp_path, healthy=lambda u: http_healthy(u, 2.0))
        states.clear()
        states.update(WatchState.read(WatchState.dump({h: s.state for h, s in steps.items()})))
        sent.extend(s.alert for s in steps.values() if s.alert)
        return steps["box"].status

    assert check(T0) == UP
    health.stop()  # production down by hand
    assert check(T0 + 3 * MIN) == DOWN
    assert check(T0 + 9 * MIN) == DOWN  # 6 min down: within the 10 min grace
    assert sent == []
    assert check(T0 + 13 * MIN) == ALERTED
    assert check(T0 + 16 * MIN) == ALERTED  # said once
    (down,) = sent
    assert "production on host box has been down for 10 min outside any run" in down
    assert "since 2026-12-07 10:03:00 UTC" in down and health.url in down
    health.start()  # back on its port
    assert check(T0 + 19 * MIN) == UP
    assert sent[1] == (
        f"production on host box is back: {health.url} answers again at 2026-12-07 10:19:00 UTC, "
        "down since 2026-12-07 10:03:00 UTC (16 min)"
    )
    assert check(T0 + 22 * MIN) == UP and len(sent) == 2
    assert states == {"box": WatchState()}


def test_a_short_outage_within_the_grace_is_no_alert() -> None:
    s = step("box", WatchState(), healthy=False, now=T0, grace_s=600, url="u")
    assert (s.status, s.alert, s.state) == (DOWN, None, WatchState(T0, None))
    back = step("box", s.state, healthy=True, now=T0 + 4 * MIN, grace_s=600, url="u")
    assert (back.status, back.alert, back.state) == (UP, None, WatchState())
    assert back.line == "box: production healthy (back within its grace, down 4 min)"


def test_a_grace_of_seconds_is_said_in_seconds() -> None:
    s = step("box", WatchState(T0), healthy=False, now=T0 + timedelta(seconds=45), grace_s=30, url="u")
    assert s.alert is not None and "down for 45 s" in s.alert and "(grace 30 s)" in s.alert, s.alert


def write_marker(state_dir: Path, state: str, restore_by: datetime) -> None:
    path = marker_path(state_dir, "box")
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"host": "box", "run_id": "r7", "state": state, "restore_by": restore_by.isoformat()}
    path.write_text(json.dumps(body))


def test_a_run_holding_the_box_is_not_checked_until_its_planned_outage_ends(tmp_path: Path) -> None:
    asked: list[str] = []

    def healthy(url: str) -> bool:
        asked.append(url)
        return False

    boxes = {"box": production("http://127.0.0.1:9/health")}
    for state in ("stopped", HELD_FOR_NIGHT):
        write_marker(tmp_path, state, T0 + 60 * MIN)
        steps = watch(boxes, {"box": WatchState(T0 - 5 * MIN)}, now=T0, state_dir=tmp_path, healthy=healthy)
        assert steps["box"].status == SKIPPED and asked == []
        assert "run r7 has production" in steps["box"].line and "until 11:00:00 UTC" in steps["box"].line
        assert steps["box"].state == WatchState()  # an unreported outage is the run's now
    # its planned outage over, or production not restored: the watch's business again
    assert held_by_run(tmp_path, "box", T0 + 61 * MIN) is None
    write_marker(tmp_path, "not_restored", T0 + 60 * MIN)
    assert held_by_run(tmp_path, "box", T0) is None
    steps = watch(boxes, {}, now=T0, state_dir=tmp_path, healthy=healthy)
    assert steps["box"].status == DOWN and asked == ["http://127.0.0.1:9/health"]


def test_an_outage_already_reported_stays_reported_through_a_run() -> None:
    alerted = WatchState(T0, T0 + 10 * MIN)
    held = step("box", alerted, healthy=None, now=T0 + 30 * MIN, grace_s=600, url="u", held="a run")
    assert held.state == alerted and held.alert is None
    back = step("box", held.state, healthy=True, now=T0 + 90 * MIN, grace_s=600, url="u")
    assert back.alert is not None and "(1 h 30 min)" in back.alert


def test_an_unreadable_cursor_starts_afresh() -> None:
    assert WatchState.read("not json") == {}
    assert WatchState.read('{"box": 3}') == {"box": WatchState()}
    states = {"box": WatchState(T0, T0 + MIN)}
    assert WatchState.read(WatchState.dump(states)) == states
