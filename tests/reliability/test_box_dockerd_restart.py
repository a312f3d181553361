"""A Box's dockerd restarted mid-benchmark (a package upgrade restarting docker.service at night) does not
bring production back beside the engine, whatever its restart policy; after the run production has its
policy again.

``docker stop`` keeps an ``always`` container down only until dockerd restarts: dockerd then starts it.
The run's guard suspends the policy before its stop (``docker update --restart=no``) and puts it back
after its start. Here production is a busybox httpd container on a dockerd of the test's own (the
shared one is never restarted), stopped by the guard; that dockerd is restarted while the guard holds
production down. Beside it a control container with the same policy is stopped by a plain ``docker
stop``: with ``always`` dockerd starts the control again, so the restart really is one that resurrects
containers, and production stays down only because of the guard.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from conftest import need
from support.bench_docker import healthy
from support.infra import free_port
from support.private_dockerd import PrivateDockerd, private_dockerd_available

from strix_pipeline.config import ProductionEngine
from strix_pipeline.hosts.box.marker import HELD_FOR_NIGHT, read_marker
from strix_pipeline.hosts.box.production import ProductionGuard

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def dockerd(docker_engine: None, tmp_path: Path) -> Iterator[PrivateDockerd]:
    need(private_dockerd_available(), "a dockerd to start (root, /usr/sbin/dockerd, busybox)", "run as root")
    # a short path: the daemon's unix socket must fit in 108 bytes
    d = PrivateDockerd(Path("/tmp") / f"strix-dockerd-{free_port()}")
    d.start()
    try:
        yield d
    finally:
        d.stop()


def httpd(d: PrivateDockerd, image: str, name: str, policy: str) -> str:
    """A busybox httpd container with ``policy``; its health URL once it answers."""
    port = free_port()
    d.docker(
        "run", "-d", "--name", name, "--network", "host", f"--restart={policy}", image, "sh", "-c",
        f"mkdir -p /www && echo ok > /www/health && httpd -f -p 127.0.0.1:{port} -h /www & "
        "trap 'kill $!; exit 0' TERM; wait",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/health"
    deadline = time.monotonic() + 15
    while not healthy(url):
        assert time.monotonic() < deadline, f"{name} never answered {url}"
        time.sleep(0.1)
    return url


def state(d: PrivateDockerd, name: str) -> tuple[str, str, int]:
    """(status, restart policy, restart count) as ``docker inspect`` shows them."""
    fmt = "{{.State.Status}} {{.HostConfig.RestartPolicy.Name}} {{.RestartCount}}"
    status, policy, count = d.docker("inspect", "-f", fmt, name).split()
    return status, policy, int(count)


def settled(d: PrivateDockerd, names: list[str], seconds: float = 3.0) -> dict[str, list[str]]:
    """Every status each container is seen in for ``seconds`` after dockerd answers again (it starts
    the containers its policies say in the background)."""
    seen: dict[str, list[str]] = {n: [] for n in names}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for n in names:
            s = state(d, n)[0]
            if not seen[n] or seen[n][-1] != s:
                seen[n].append(s)
        time.sleep(0.2)
    return seen


@pytest.mark.parametrize("policy", ["always", "unless-stopped"])
def test_a_dockerd_restarted_mid_benchmark_does_not_bring_production_back(policy, dockerd, tmp_path):
    image = dockerd.import_busybox()
    url = httpd(dockerd, image, "production", policy)
    control_url = httpd(dockerd, image, "control", policy)
    client = docker.DockerClient(base_url=dockerd.url, timeout=60)
    guard = ProductionGuard(
        "box",
        ProductionEngine(container="production", health_url=url, health_timeout_s=15),
        state_dir=tmp_path / "state",
        client=client,
        run_id="dockerd-restart",
        poll_interval_s=0.2,
        stop_timeout_s=5,
        fallback=False,  # the Box's own restore is run by its shell, on the shared daemon here: not armed
    )
    try:
        with guard:
            dockerd.docker("stop", "-t", "5", "control")  # the same policy, stopped without the guard
            dockerd.restart()  # mid-benchmark
            seen = settled(dockerd, ["production", "control"])
            assert seen["production"] == ["exited"], seen
            assert not healthy(url), "production answers mid-benchmark"
            assert state(dockerd, "production") == ("exited", "no", 0)  # suspended while down
            # the control shows what the restart does to a container stopped with its policy in force
            if policy == "always":
                assert seen["control"][-1] == "running" and healthy(control_url), seen
            else:
                assert seen["control"] == ["exited"], seen  # unless-stopped: a docker stop is kept
        assert guard.restored is True, guard.restore_error
        assert healthy(url)
        assert state(dockerd, "production") == ("running", policy, 0)
        # and the policy put back is in force: the next dockerd restart keeps it running
        dockerd.restart()
        assert settled(dockerd, ["production"])["production"][-1] == "running"
        assert state(dockerd, "production")[1] == policy
    finally:
        client.close()


def test_a_night_handed_over_between_runs_keeps_the_policy_suspended_and_the_last_run_puts_it_back(
    dockerd, tmp_path
):
    """A night spanning Dagster runs: the first run leaves production down for the next (its marker
    holds the suspended policy), dockerd restarts in between, the next run adopts the marker and starts
    production with its policy back."""
    image = dockerd.import_busybox()
    url = httpd(dockerd, image, "production", "always")
    client = docker.DockerClient(base_url=dockerd.url, timeout=60)
    state_dir = tmp_path / "state"

    def guard(run_id: str) -> ProductionGuard:
        return ProductionGuard(
            "box",
            ProductionEngine(container="production", health_url=url, health_timeout_s=15),
            state_dir=state_dir,
            client=client,
            run_id=run_id,
            poll_interval_s=0.2,
            stop_timeout_s=5,
            fallback=False,
        )

    try:
        first = guard("night-a").__enter__()
        first.hand_over("2026-12-07", ["night-a"], 1)
        dockerd.restart()  # between the night's runs
        assert settled(dockerd, ["production"])["production"] == ["exited"]
        info = read_marker(state_dir, "box")
        assert info is not None and info["state"] == HELD_FOR_NIGHT
        assert info["restart_policy"]["Name"] == "always", info
        last = guard("night-b")
        last.adopt(info)
        last.__exit__(None, None, None)
        assert last.restored is True, last.restore_error
        assert state(dockerd, "production") == ("running", "always", 0)
        assert read_marker(state_dir, "box") is None
    finally:
        client.close()
