"""Production with a restart policy of its own, on the Box simulator over the real ``ssh://`` path: it
stays down through a benchmark and comes back with its policy as it was.

Production is a busybox httpd container started with ``--restart always`` (or ``unless-stopped``), as a
Box owner runs llama-server so that it survives a reboot. ``docker stop`` alone keeps such a container
down only until dockerd restarts (a package upgrade restarting docker.service at night brings an
``always`` container back beside the engine); so the run suspends the policy (``docker update
--restart=no``) before the stop and puts it back after the start. The test reads ``docker inspect``
throughout the run: every sample of the stopped container must carry no policy, the container must
never run between the stop and the restore (nor be restarted by dockerd: ``RestartCount``), and after
the run its ``HostConfig.RestartPolicy`` must be the one it had.

What else can restart production is not the run's to suspend: a watchtower container on the Box and
a compose project production belongs to are read by ``strix doctor``, which names a watchtower that
would restart production mid-run and the label that excludes it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from support.bench_docker import HOST, healthy, image_record, managed, remove_left_behind
from support.box_images import ProductionWatch, production_httpd
from support.box_sim import KEY_ENV, BoxSim, box_config

from strix_pipeline.config import DockerHostConfig, ProductionEngine
from strix_pipeline.doctor.restarters import restarter_checks
from strix_pipeline.hosts.box.restarters import ENABLE, EXCLUDE
from strix_pipeline.hosts.docker.host import make_client
from strix_pipeline.runner import BenchmarkTarget, run_benchmark

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

RUN_PREFIX = "boxpolicy-"


@pytest.fixture
def nothing_left_behind(docker_engine: None) -> Iterator[None]:
    yield
    left = remove_left_behind(RUN_PREFIX)
    assert not left, f"containers left behind: {left}"


def inspect(name: str) -> dict:
    out = subprocess.run(
        ["docker", "inspect", name], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return json.loads(out)[0]


def dedupe(seen: list[str]) -> list[str]:
    return [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]


@pytest.mark.parametrize("policy", ["always", "unless-stopped"])
def test_production_with_a_restart_policy_stays_down_through_the_benchmark_and_keeps_its_policy(
    policy,
    llama,
    model_path,
    box_sshd,
    box_probe_image,
    busybox,
    client,
    tmp_path,
    monkeypatch,
    nothing_left_behind,
):
    monkeypatch.setenv(KEY_ENV, str(box_sshd.key))
    sim = BoxSim.build(tmp_path / "box")
    sim.install(monkeypatch, box_probe_image)
    with production_httpd(client, busybox, f"strix-test-{policy}-production", restart=policy) as (name, url):
        before = inspect(name)
        assert before["HostConfig"]["RestartPolicy"] == {"Name": policy, "MaximumRetryCount": 0}
        config = box_config(
            tmp_path,
            llama,
            model_path,
            box_sshd,
            production={"container": name, "health_url": url, "health_timeout_s": 30},
        )
        run_id = f"{RUN_PREFIX}{policy}"
        lines: list[str] = []
        fmt = "{{.State.Status}} {{.HostConfig.RestartPolicy.Name}}"
        with ProductionWatch(name, fmt=fmt) as watch:
            result = run_benchmark(
                config,
                BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", image_record(llama)),
                run_id=run_id,
                log=lines.append,
                force=True,
                scenarios=["smoke"],
            )
        after = inspect(name)
        assert healthy(url), "production does not answer after the run"

    assert result.run.status == "ok", (result.run.status, result.run.failure_reason, lines[-20:])
    assert result.production_restored is True
    assert managed(run_id) == [], "the run left its engine container"
    # down once, for the benchmark, and never back in between: not by its policy, not by dockerd
    states = dedupe([s.split()[0] for s in watch.states])
    assert states == ["running", "exited", "running"], watch.states
    assert after["RestartCount"] == before["RestartCount"] == 0, watch.states
    # while it was down its policy was suspended, so a dockerd restarted mid-run would not start it
    down = {s for s in watch.states if s.startswith("exited")}
    assert down == {"exited no"}, watch.states
    # and afterwards its policy is its own again, as `docker inspect` shows it
    assert watch.states[0] == watch.states[-1] == f"running {policy}", watch.states
    assert after["HostConfig"]["RestartPolicy"] == before["HostConfig"]["RestartPolicy"], after["HostConfig"]


def test_the_doctor_names_a_watchtower_on_the_box_and_production_s_compose_project(
    box_sshd, box_key, busybox, client, tmp_path
):
    """Read over the Box's ssh from real ``docker inspect`` output: a watchtower container (its image's
    label, started to revive stopped containers) and a production created by compose (its labels)."""
    compose = {
        "com.docker.compose.project": "llm",
        "com.docker.compose.service": "llama",
        "com.docker.compose.project.config_files": "/srv/llm/compose.yaml",
    }
    tower = client.containers.run(  # its arguments after the entrypoint, as watchtower's image has them
        busybox,
        ["--interval", "300", "--cleanup"],
        entrypoint=["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done", "watchtower"],
        detach=True,
        name=f"{RUN_PREFIX}watchtower",
        labels={"com.centurylinklabs.watchtower": "true"},
        environment={"WATCHTOWER_INCLUDE_STOPPED": "true", "WATCHTOWER_REVIVE_STOPPED": "true"},
    )
    excluded_labels = {**compose, ENABLE: "false"}
    try:
        with (
            production_httpd(
                client, busybox, "strix-test-compose-production", restart="always", labels=compose
            ) as (name, url),
            production_httpd(client, busybox, "strix-test-excluded-production", labels=excluded_labels) as (
                excluded,
                excluded_url,
            ),
        ):
            host = DockerHostConfig(
                kind="docker",
                docker_host=box_sshd.url,
                ssh_key_path_env=KEY_ENV,
                ssh_known_hosts=str(box_sshd.known_hosts),
                production=ProductionEngine(container=name, health_url=url),
            )
            box = make_client(host, timeout_s=30)
            try:
                checks = {c.name: c for c in restarter_checks("box", host, box)}
                other = host.model_copy(
                    update={"production": ProductionEngine(container=excluded, health_url=excluded_url)}
                )
                left_alone = {c.name: c for c in restarter_checks("box", other, box)}
            finally:
                box.close()
    finally:
        tower.remove(force=True)

    assert checks["production restart policy"].detail.startswith("always: suspended for each run")
    assert "service llama of compose project llm" in checks["production compose project"].detail
    w = checks[f"watchtower {RUN_PREFIX}watchtower"]
    assert not w.ok and w.required and "it can restart production mid-run" in w.detail, w.detail
    assert EXCLUDE in (w.fix or "")
    w = left_alone[f"watchtower {RUN_PREFIX}watchtower"]
    assert w.ok and f"production is labelled {EXCLUDE}" in w.detail, w.detail
    assert left_alone["production restart policy"].detail.startswith("none")
