"""The window as a value (open or not, and why), the windows of a week, and the one account of what is
measured that the sensor and the weekly schedule share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning import due, measured
from strix_pipeline.planning.window import window_at, windows

BOX = DockerHostConfig(
    kind="docker", docker_host="unix:///x.sock", maintenance_window="0 3 * * *", maintenance_window_hours=6
)


def test_window_at_says_open_or_closed_and_why_without_raising():
    inside = window_at(BOX, "0 3 * * 1", datetime(2026, 12, 8, 4, 0, tzinfo=UTC), "Europe/Berlin")
    assert inside.open and inside.window is not None
    assert inside.window.end - inside.window.start == timedelta(hours=6)
    outside = window_at(BOX, "0 3 * * 1", datetime(2026, 12, 8, 12, 0, tzinfo=UTC), "Europe/Berlin")
    assert not outside.open and outside.window is None and "outside the maintenance window" in outside.reason


def test_a_nightly_window_opens_seven_times_a_week_across_a_dst_change():
    start = datetime(2026, 10, 19, 3, 0, tzinfo=UTC)  # the week holding the change back (25 October)
    got = windows(BOX, "0 3 * * 1", start, start + timedelta(days=7), "Europe/Berlin")
    assert len(got) == 7
    assert all(w.start.astimezone(datetime.now().astimezone().tzinfo).tzinfo for w in got)
    assert [f"{w.start:%H:%M}" for w in got] == ["03:00"] * 7  # Berlin wall clock, both sides of the change


def test_hosts_in_window_no_longer_reads_an_exception_as_false(monkeypatch: pytest.MonkeyPatch):
    """The old code caught EngineStartError and answered False: a broken check looked like a closed window."""
    from support.paths import REPO

    from strix_pipeline.config_load import load_config
    from strix_pipeline.planning.week import standard_images

    config = load_config(REPO / "config" / "strix-halo.example.toml")
    image = standard_images(config, datetime(2026, 12, 7, tzinfo=UTC))[0]

    def broken(*args, **kwargs):
        raise EngineStartError("failed_guard", "the check itself broke")

    monkeypatch.setattr(due, "window_at", broken)
    with pytest.raises(EngineStartError):
        due.hosts_in_window(config, image, datetime(2026, 12, 7, 3, 0, tzinfo=UTC))


def test_one_account_ever_for_the_sensor_since_the_week_start_for_the_schedule():
    now = datetime(2026, 12, 9, 12, 0, tzinfo=UTC)  # a Wednesday
    week = measured.week_start("0 3 * * 1", now, "Europe/Berlin")
    assert week == datetime(2026, 12, 7, 2, 0, tzinfo=UTC)  # Monday 03:00 in Berlin
    rows = [
        measured.MeasuredRun("box", "vllm", "sha256:a", "qwen", week - timedelta(days=2)),  # last week
        measured.MeasuredRun("box", "vllm", "sha256:b", "qwen", week + timedelta(hours=1)),  # this week
    ]
    assert measured.measured(rows) == {
        measured.Measured("box", "vllm", "sha256:a", "qwen"),
        measured.Measured("box", "vllm", "sha256:b", "qwen"),
    }
    assert measured.measured(rows, since=week) == {measured.Measured("box", "vllm", "sha256:b", "qwen")}
