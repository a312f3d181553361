"""Production held across a night, on the Box simulator over the real ``ssh://`` path: a night of runs stops
production once, not once per run.

Two real llama-server runs of two model profiles on the simulated Box (this machine's dockerd behind a
real sshd), inside one :class:`~strix_pipeline.runner.night_hold.HostNight` as the benchmark asset makes
them: production (a busybox httpd container answering its health URL) is watched throughout the
night and is seen stopped once, before the first run's engine starts, and running again once, after
the second run's engine is gone. The second run's pre-stop checks find production down on purpose
(not "unhealthy"), and both runs record the night's one outage. Before runner/night_hold.py each run
stopped and started production itself: the watch saw running, exited, running, exited, running.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.bench_docker import HOST, healthy, image_record, managed, remove_left_behind
from support.box_images import ProductionWatch, production_httpd
from support.box_sim import KEY_ENV, BoxSim, box_config

from strix_pipeline.config import StrixConfig
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.runner.night_hold import HostNight

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

RUN_PREFIX = "boxnight-"


@pytest.fixture(autouse=True)
def nothing_left_behind(docker_engine: None) -> Iterator[None]:
    yield
    left = remove_left_behind(RUN_PREFIX)
    assert not left, f"containers left behind: {left}"


def test_a_night_of_two_runs_stops_production_once_and_starts_it_once(
    llama, model_path, box_sshd, box_probe_image, busybox, client, tmp_path, monkeypatch
):
    monkeypatch.setenv(KEY_ENV, str(box_sshd.key))
    sim = BoxSim.build(tmp_path / "box")
    sim.install(monkeypatch, box_probe_image)
    with production_httpd(client, busybox, "strix-test-night-production") as (name, url):
        config = box_config(
            tmp_path,
            llama,
            model_path,
            box_sshd,
            production={"container": name, "health_url": url, "health_timeout_s": 30},
        )
        data = config.model_dump()
        data["models"]["gemma-1slot"] = {**data["models"]["gemma"], "parallel": 1}
        config = StrixConfig.model_validate(data)
        lines: list[str] = []
        results = []
        with ProductionWatch(name) as watch:
            with HostNight(HOST, config.hosts[HOST], log=lines.append) as night:
                for model in ("gemma", "gemma-1slot"):
                    run_id = f"{RUN_PREFIX}{model}"
                    result = run_benchmark(
                        config,
                        BenchmarkTarget(HOST, "llamacpp", model, "tiny", image_record(llama)),
                        run_id=run_id,
                        log=lines.append,
                        force=True,
                        scenarios=["smoke"],
                    )
                    assert managed(run_id) == [], f"{run_id} left its engine container"
                    # between the runs production stays down: the night starts it, not the run
                    assert watch.states[-1] == "exited", (run_id, watch.states)
                    results.append(result)
        assert healthy(url), "production does not answer after the night"

    # production: stopped once, running again once
    assert watch.states == ["running", "exited", "running"], watch.states
    assert (night.stops, night.starts) == (1, 1), lines[-20:]
    first, second = (r.run for r in results)
    for r in results:
        assert r.run.status == "ok", (r.run.status, r.run.failure_reason, lines[-20:])
        assert r.production_restored is True
    # both runs carry the night's one outage, which ends after the second run
    assert first.production_down_at is not None and first.production_down_at == second.production_down_at
    assert first.production_up_at is not None and first.production_up_at == second.production_up_at
    assert second.ended_at is not None and first.production_up_at >= second.ended_at
    assert " -np 2 " in f" {first.launch_command} " and " -np 1 " in f" {second.launch_command} "
    assert any(f"production on {HOST} stopped once for the night" in ln for ln in lines)
    assert any(f"production on {HOST} started again once after 2 run(s): healthy" in ln for ln in lines)


def test_a_night_of_two_dagster_runs_hands_production_over_and_the_last_run_starts_it(
    llama, model_path, box_sshd, box_probe_image, busybox, client, tmp_path, monkeypatch
):
    """The weekly schedule's night spans Dagster runs (one per image version, each its own process):
    the first run leaves production down for the second -- its restore still armed on the Box over the
    real sshd -- and the second joins it and starts it. Before, each Dagster run stopped and started
    production: running, exited, running, exited, running."""
    from strix_pipeline.hosts.box.marker import marker_path, read_marker
    from strix_pipeline.runner.docker_run import restore_held

    monkeypatch.setenv(KEY_ENV, str(box_sshd.key))
    sim = BoxSim.build(tmp_path / "box")
    sim.install(monkeypatch, box_probe_image)
    with production_httpd(client, busybox, "strix-test-night2-production") as (name, url):
        config = box_config(
            tmp_path,
            llama,
            model_path,
            box_sshd,
            production={"container": name, "health_url": url, "health_timeout_s": 30},
        )
        state = config.artifacts_dir() / "state"
        queue = ["dagster-a", "dagster-b"]  # the night's runs on the Box, as the instance lists them
        lines: list[str] = []
        nights = []
        with ProductionWatch(name) as watch:
            for member in queue:
                night = HostNight(
                    HOST,
                    config.hosts[HOST],
                    log=lines.append,
                    night_id="2026-12-07",
                    member=member,
                    state_dir=state,
                    more_to_come=lambda done: len([m for m in queue if m not in done]),
                    restore_held=restore_held(config, HOST, member, lines.append),
                )
                with night:
                    run_id = f"{RUN_PREFIX}{member}"
                    run_benchmark(
                        config,
                        BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", image_record(llama)),
                        run_id=run_id,
                        log=lines.append,
                        force=True,
                        scenarios=["smoke"],
                    )
                nights.append(night)
                if member == "dagster-a":  # between the Dagster runs: down, handed over, restore armed
                    assert watch.states[-1] == "exited", watch.states
                    info = read_marker(state, HOST)
                    assert info and info["state"] == "held_for_night" and info["done"] == ["dagster-a"], info
                    assert info.get("armed"), info  # the Box's own restore is still armed
        assert healthy(url), "production does not answer after the night"
        assert not marker_path(state, HOST).exists()

    assert watch.states == ["running", "exited", "running"], watch.states
    a, b = nights
    assert (a.stops, a.starts, a.handed_over) == (1, 0, 1), lines[-20:]
    assert (b.stops, b.starts, b.handed_over) == (0, 1, 0), lines[-20:]
    for night in nights:
        assert night.runs[0].run.status == "ok", (night.runs[0].run.failure_reason, lines[-20:])
    assert b.runs[0].production_restored is True
    # the second run's record carries the night's outage: from the first run's stop
    assert b.runs[0].run.production_down_at == a.runs[0].run.production_down_at
    assert any("this run joins it" in ln for ln in lines), lines[-20:]
