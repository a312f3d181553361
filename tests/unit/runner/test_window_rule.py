"""One window rule before a run: the night's admission and the runner's own check give the same answer,
production's restore (its health timeout and a margin) counted on a host that has a production."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from support.paths import REPO

from strix_pipeline.config_load import load_config
from strix_pipeline.hosts.box.production import ProductionGuard
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning.deadline import RESTORE_MARGIN_S, restore_lead_s, restore_time
from strix_pipeline.planning.estimate import Estimate
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
@pytest.mark.parametrize("minutes_left", [69, 68, 67, 60, 57, 10])
def test_the_night_and_the_runner_give_the_same_answer(production, minutes_left):
    """57 min of estimate in what is left: production's restore (its health timeout and the margin, 11 min
    with the example's 600 s) tips it on a host that has one."""
    config = _config(production)
    assert (config.hosts[HOST].production is not None) is production
    est = Estimate(57 * 60.0, "median of 3 run(s)")
    now = START + timedelta(hours=6, minutes=-minutes_left)
    fits = _night_fits(config, est, now)
    assert _runner_fits(config, est, now) is fits
    restart = restore_lead_s(config.hosts[HOST].production)
    assert fits is (est.seconds + restart <= minutes_left * 60)


def test_production_s_restart_is_counted_by_the_runner_too():
    config = _config(production=True)
    est = Estimate(58 * 60.0, "median of 3 run(s)")
    with pytest.raises(EngineStartError) as e:
        admit(config, _target(config), est, now=START + timedelta(hours=5))  # 60 min left
    assert "11 min for production's restore (its health timeout and a margin)" in e.value.reason


def test_outside_the_window_the_runner_refuses_and_the_night_defers():
    config = _config(production=True)
    noon = START + timedelta(hours=9)
    assert not _night_fits(config, Estimate(60.0, "x"), noon)
    with pytest.raises(EngineStartError) as e:
        admit(config, _target(config), Estimate(60.0, "x"), now=noon)
    assert e.value.status == "failed_guard"  # the runner's refusal outside the window, as before
    assert admit(config, _target(config), Estimate(60.0, "x"), now=noon, force=True) is None


@pytest.mark.parametrize("health_timeout_s", [30, 300, 600])
def test_admission_ends_where_the_restore_armed_on_the_box_fires(health_timeout_s):
    """The last admitted run ends exactly when the Box's own restore fires (and the run's deadline is):
    a second more of estimate and it is deferred."""
    config = _config(production=True)
    host = config.hosts[HOST]
    production = host.production.model_copy(update={"health_timeout_s": health_timeout_s})
    config.hosts[HOST] = host.model_copy(update={"production": production})
    now = START + timedelta(hours=5)
    window_end = START + timedelta(hours=6)
    restore_at = restore_time(window_end, production)
    assert restore_at == window_end - timedelta(seconds=health_timeout_s + RESTORE_MARGIN_S)
    left = (restore_at - now).total_seconds()
    assert _night_fits(config, Estimate(left, "x"), now) and _runner_fits(config, Estimate(left, "x"), now)
    assert not _night_fits(config, Estimate(left + 1, "x"), now)


def test_the_restore_armed_on_the_box_fires_at_the_same_time(tmp_path):
    config = _config(production=True)
    production = config.hosts[HOST].production
    window_end = datetime.now(UTC) + timedelta(hours=2)
    scripts: list[str] = []

    def runner(argv, **_):
        scripts.append(argv[-1])
        return subprocess.CompletedProcess(argv, 0, "armed systemd x\n", "")

    guard = ProductionGuard(HOST, production, state_dir=tmp_path, restore_by=window_end, runner=runner)
    armed_at = datetime.now(UTC)
    guard.arm()
    delay = int(re.search(r"--on-active=(\d+)s", scripts[0]).group(1))
    fires = armed_at + timedelta(seconds=delay)
    assert abs(fires - restore_time(window_end, production)) < timedelta(seconds=2)
