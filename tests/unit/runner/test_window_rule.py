"""One window rule before a run: the night's admission and the runner's own check give the same answer,
production's restart counted on a host that has a production."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.paths import REPO

from strix_pipeline.config_load import load_config
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning.estimate import Estimate
from strix_pipeline.planning.night_fit import RESTART_S
from strix_pipeline.runner.docker_run import admit
from strix_pipeline.runner.night_hold import HostNight
from strix_pipeline.runner.target import BenchmarkTarget

EXAMPLE = REPO / "config" / "strix-halo.example.toml"
HOST = "strix-halo"
START = datetime(2026, 9, 7, 3, 0, tzinfo=UTC)  # the window: 03:00 UTC for 6 h


def _config(production: bool):
    config = load_config(EXAMPLE)
    host = config.hosts[HOST].model_copy(
        update={"maintenance_window": "0 3 * * *", "maintenance_window_hours": 6.0}
        | ({} if production else {"production": None})
    )
    project = config.project.model_copy(update={"timezone": "UTC"})
    return config.model_copy(update={"project": project, "hosts": {**config.hosts, HOST: host}})


def _target(config) -> BenchmarkTarget:
    run = config.runs[HOST][0]
    return BenchmarkTarget(HOST, run.engine, run.model, run.profile, None)


def _runner_fits(config, est: Estimate, now: datetime) -> bool:
    try:
        admit(config, _target(config), est, now=now)
    except EngineStartError as e:
        assert e.status == "deferred", e.reason
        assert "production was not stopped" in e.reason
        return False
    return True


def _night_fits(config, est: Estimate, now: datetime) -> bool:
    return HostNight(HOST, config.hosts[HOST], log=lambda _: None).admit(config, est, now=now).fits


def test_a_run_longer_than_the_time_left_is_deferred_with_the_numbers():
    config = _config(production=False)
    est = Estimate(40 * 60.0, "median of 4 run(s)")
    assert admit(config, _target(config), est, now=START + timedelta(hours=5)) == START
    with pytest.raises(EngineStartError) as e:
        admit(config, _target(config), est, now=START + timedelta(hours=5, minutes=30))
    assert e.value.status == "deferred"
    assert "estimated 40 min (median of 4 run(s)), the window has 30 min left" in e.value.reason
    assert "until 2026-09-07 09:00" in e.value.reason and "production was not stopped" in e.value.reason


@pytest.mark.parametrize("production", [True, False])
@pytest.mark.parametrize("minutes_left", [60, 59, 57, 55, 10])
def test_the_night_and_the_runner_give_the_same_answer(production, minutes_left):
    """57 min of estimate in what is left: production's restart (3 min) tips it on a host that has one."""
    config = _config(production)
    assert (config.hosts[HOST].production is not None) is production
    est = Estimate(57 * 60.0, "median of 3 run(s)")
    now = START + timedelta(hours=6, minutes=-minutes_left)
    fits = _night_fits(config, est, now)
    assert _runner_fits(config, est, now) is fits
    restart = RESTART_S if production else 0.0
    assert fits is (est.seconds + restart <= minutes_left * 60)


def test_production_s_restart_is_counted_by_the_runner_too():
    config = _config(production=True)
    est = Estimate(58 * 60.0, "median of 3 run(s)")
    with pytest.raises(EngineStartError) as e:
        admit(config, _target(config), est, now=START + timedelta(hours=5))  # 60 min left
    assert "3 min for production's restart" in e.value.reason


def test_outside_the_window_the_runner_refuses_and_the_night_defers():
    config = _config(production=True)
    noon = START + timedelta(hours=9)
    assert not _night_fits(config, Estimate(60.0, "x"), noon)
    with pytest.raises(EngineStartError) as e:
        admit(config, _target(config), Estimate(60.0, "x"), now=noon)
    assert e.value.status == "failed_guard"  # the runner's refusal outside the window, as before
    assert admit(config, _target(config), Estimate(60.0, "x"), now=noon, force=True) is None
