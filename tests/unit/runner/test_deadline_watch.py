"""A run's deadline kept: the engine removed once when it passes, the run told so; a deadline already
passed refuses the start; a block that ends before its deadline never removes anything."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.runner.deadline_watch import DeadlineWatch
from strix_pipeline.usable import DEADLINE


def test_at_the_deadline_the_engine_is_removed_once_and_the_run_says_deadline():
    removed: list[float] = []
    lines: list[str] = []
    watch = DeadlineWatch(datetime.now(UTC) + timedelta(seconds=0.2), lambda: removed.append(1), lines.append)
    with watch:
        time.sleep(0.6)
    assert watch.passed and removed == [1]
    err = watch.error()
    assert err.status == DEADLINE and "stopped at its deadline" in err.reason
    assert any("deadline" in ln and "removed" in ln for ln in lines)


def test_a_deadline_already_passed_refuses_the_start():
    removed: list[int] = []
    watch = DeadlineWatch(datetime.now(UTC) - timedelta(seconds=1), lambda: removed.append(1), print)
    with pytest.raises(EngineStartError) as e, watch:
        pytest.fail("the block must not run")
    assert e.value.status == DEADLINE and "passed before the engine started" in e.value.reason
    assert watch.passed and removed == []


def test_a_run_that_ends_before_its_deadline_is_left_alone():
    removed: list[int] = []
    watch = DeadlineWatch(datetime.now(UTC) + timedelta(seconds=0.3), lambda: removed.append(1), print)
    with watch:
        pass
    time.sleep(0.5)
    assert not watch.passed and removed == []


def test_a_removal_that_fails_is_in_the_reason():
    def boom() -> None:
        raise RuntimeError("daemon gone")

    watch = DeadlineWatch(datetime.now(UTC) + timedelta(seconds=0.1), boom, print)
    with watch:
        time.sleep(0.4)
    assert watch.passed and "daemon gone" in watch.error().reason
