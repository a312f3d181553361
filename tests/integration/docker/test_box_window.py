"""A run that does not fit what is left of the maintenance window, on the Box simulator (dockerd behind a
real sshd, every Docker call over ``ssh://``): deferred to the next window -- recorded as ``deferred``,
never a failure and never a success -- with production never stopped; with its series' history the
estimate is the history's and the run goes ahead, its log saying how far the estimate was off."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from support.bench_docker import HOST, make_config, managed, target
from support.box_images import ProductionWatch
from support.box_sim import KEY_ENV  # the env var the simulator's box_key sets
from support.sshd import Sshd
from support.warehouse import make_run

from strix_pipeline.config import StrixConfig
from strix_pipeline.runner import run_benchmark
from strix_pipeline.usable import served
from strix_pipeline.warehouse import Warehouse

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]


def window_config(
    tmp_path: Path, llama, model_path: Path, box_sshd: Sshd, production, hours: float
) -> StrixConfig:
    """The window opens every minute and lasts ``hours``: at most that much of it is ever left."""
    name, url = production
    data = make_config(tmp_path, llama, model_path).model_dump()
    data["hosts"][HOST].update(
        {
            "docker_host": box_sshd.url,
            "ssh_key_path_env": KEY_ENV,
            "ssh_known_hosts": str(box_sshd.known_hosts),
            "maintenance_window": "* * * * *",
            "maintenance_window_hours": hours,
            "production": {"container": name, "health_url": url, "health_timeout_s": 30},
        }
    )
    return StrixConfig.model_validate(data)


def test_a_run_that_does_not_fit_the_window_is_deferred_and_production_keeps_serving(
    llama, model_path, box_sshd, box_key, production, tmp_path
):
    config = window_config(tmp_path, llama, model_path, box_sshd, production, hours=0.25)  # 15 min at most
    lines: list[str] = []
    with ProductionWatch(production[0]) as watch:
        result = run_benchmark(
            config, target(llama), run_id="win-deferred", log=lines.append, scenarios=["smoke"]
        )
    r = result.run
    assert r.status == "deferred", (r.status, r.failure_reason)
    assert "estimated 45 min (default (no run of this series yet))" in (r.failure_reason or "")
    assert (
        "deferred to the next window" in r.failure_reason and "production was not stopped" in r.failure_reason
    )
    assert watch.states == ["running"] and r.production_down_at is None
    assert managed("win-deferred") == []
    ok, why = served(result)
    assert not ok and why.startswith("deferred, nothing ran")
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_run(result)
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        row = wh.query_df("SELECT status, usable FROM v_run_base WHERE run_id = 'win-deferred'").to_dicts()
        cell = wh.query_df("SELECT outcome, fails FROM v_support_matrix").to_dicts()
    assert row == [{"status": "deferred", "usable": False}]
    assert cell == [{"outcome": "not_run", "fails": False}]  # neither a failure nor a success


def test_with_its_history_the_run_fits_and_its_estimate_error_is_said(
    llama, model_path, box_sshd, box_key, production, tmp_path
):
    config = window_config(tmp_path, llama, model_path, box_sshd, production, hours=0.25)
    tgt = target(llama)
    with Warehouse.open(config.warehouse_path()) as wh:  # two earlier runs of the series, 40 s each
        for i in range(2):
            past = make_run(f"win-past-{i}", engine=tgt.engine, host=tgt.host)
            run = past.run
            run.model_profile, run.profile = tgt.model, tgt.profile
            run.ended_at = run.started_at + timedelta(seconds=40)
            wh.load_run(past)
    lines: list[str] = []
    result = run_benchmark(config, tgt, run_id="win-fits", log=lines.append, scenarios=["smoke"])
    assert result.run.status == "ok", (result.run.status, result.run.failure_reason)
    said = [ln for ln in lines if "estimated 1 min (median of 2 run(s)), took" in ln]
    assert said and "off by" in said[0], lines[-5:]
