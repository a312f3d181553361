"""A run still going at its deadline, on the Box simulator (dockerd behind a real sshd, every Docker call
over ``ssh://``): at the restore's time -- the window's end less production's health timeout and the
margin, the time the Box's own restore is armed for -- the engine's container is removed, the run is
recorded as ``deadline`` (a failure with its reason, what it measured before kept) and production is
back and healthy before the window ends."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.bench_docker import HOST, container_state, healthy, make_config, managed, target
from support.box_sim import KEY_ENV  # the env var the simulator's box_key sets
from support.sshd import Sshd

from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.deadline import RESTORE_MARGIN_S, restore_lead_s
from strix_pipeline.planning.estimate import Estimate
from strix_pipeline.runner import run_benchmark
from strix_pipeline.usable import DEADLINE, served
from strix_pipeline.warehouse import Warehouse

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

DEADLINE_IN_S = 45  # from the run's start: past production's stop and the engine's load


def deadline_config(tmp_path: Path, llama, model_path: Path, box_sshd: Sshd, production) -> StrixConfig:
    """A window that opened at this minute's start and ends so that its restore's time (the run's
    deadline) is DEADLINE_IN_S from now; a suite far longer than that."""
    name, url = production
    data = make_config(tmp_path, llama, model_path).model_dump()
    prod = {"container": name, "health_url": url, "health_timeout_s": 30}
    lead = prod["health_timeout_s"] + RESTORE_MARGIN_S
    now = datetime.now(UTC)
    opened = now.replace(second=0, microsecond=0)
    end = now + timedelta(seconds=DEADLINE_IN_S + lead)
    data["hosts"][HOST].update(
        {
            "docker_host": box_sshd.url,
            "ssh_key_path_env": KEY_ENV,
            "ssh_known_hosts": str(box_sshd.known_hosts),
            "maintenance_window": "* * * * *",
            "maintenance_window_hours": (end - opened).total_seconds() / 3600,
            "production": prod,
        }
    )
    sweep = data["profiles"]["tiny"]["concurrency_sweep"]
    sweep.update({"levels": [1], "requests_per_level": 2000, "output_tokens": 64, "max_duration_s": 600})
    return StrixConfig.model_validate(data)


def test_a_run_at_its_deadline_is_stopped_recorded_and_production_restored_on_time(
    llama, model_path, box_sshd, box_key, production, tmp_path
):
    while not 2 <= datetime.now(UTC).second <= 30:  # the window's start stays this minute's
        time.sleep(1)
    config = deadline_config(tmp_path, llama, model_path, box_sshd, production)
    host = config.hosts[HOST]
    assert restore_lead_s(host.production) == 90  # 30 s health timeout + the 60 s margin
    started = datetime.now(UTC)
    window_end = started.replace(second=0, microsecond=0) + timedelta(hours=host.maintenance_window_hours)
    lines: list[str] = []
    result = run_benchmark(
        config,
        target(llama),
        run_id="deadline-run",
        log=lines.append,
        scenarios=["concurrency_sweep"],
        estimate=Estimate(10.0, "a short estimate: admitted"),
    )
    ended = datetime.now(UTC)
    r = result.run
    assert r.status == DEADLINE, (r.status, r.failure_reason, lines[-10:])
    assert "stopped at its deadline" in (r.failure_reason or ""), r.failure_reason
    assert "engine removed" in r.failure_reason
    # stopped at the deadline, not at the suite's end (2000 requests of 64 tokens)
    assert ended - started < timedelta(seconds=DEADLINE_IN_S + 60), (started, ended)
    assert managed("deadline-run") == []  # the engine's container is gone
    name, url = production
    assert container_state(name) == "running" and healthy(url)
    assert result.production_restored is True
    assert r.production_up_at is not None and r.production_up_at <= window_end
    ok, why = served(result)
    assert not ok and "deadline" in why
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_run(result)
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        row = wh.query_df("SELECT status, usable FROM v_run_base WHERE run_id = 'deadline-run'").to_dicts()
        cell = wh.query_df("SELECT outcome FROM v_support_matrix").to_dicts()
    assert row == [{"status": DEADLINE, "usable": False}]
    assert cell == [{"outcome": "not_run"}]  # outlasting the window says nothing about the engine
