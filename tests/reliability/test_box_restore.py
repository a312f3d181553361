"""Production always comes back, or someone is told, on the Box simulator: this machine's
dockerd behind a real sshd, production a busybox httpd container stopped and started by ``docker``
commands run over that ssh, a webhook receiver on loopback.

Each fault leaves production down on the code before the Box's own restore (one start, by the
controller): the controller SIGKILLed mid-benchmark, the ssh link gone at the restore, the first
start failing. Here the restore armed on the Box brings production back by the planned outage's end,
and the webhook hears of it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.bench_docker import healthy
from support.notify import Receiver
from support.sshd import Sshd

from strix_pipeline.config import DockerHostConfig, ProductionEngine
from strix_pipeline.hosts.box.production import ProductionGuard
from strix_pipeline.hosts.box.production_alerts import ProductionAlerts
from strix_pipeline.hosts.docker.ssh import ssh_target

pytestmark = [pytest.mark.docker, pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(240)]

KEY_ENV = "STRIX_TEST_SSH_KEY"
OUTAGE_S = 20  # the planned outage: production must answer again within it
HEALTH_S = 5
FALLBACK_DELAY_S = 8


def host(sshd: Sshd) -> DockerHostConfig:
    return DockerHostConfig(
        kind="docker", docker_host=sshd.url, ssh_key_path_env=KEY_ENV, ssh_known_hosts=str(sshd.known_hosts)
    )


def engine(name: str, url: str, start: list[str] | None = None) -> ProductionEngine:
    return ProductionEngine(
        stop_command=["docker", "stop", "-t", "1", name],
        start_command=start or ["docker", "start", name],
        unit="llama-server.service",  # a production by commands names who runs it
        health_url=url,
        health_timeout_s=HEALTH_S,
    )


def guard(sshd, production, state, restore_by, alerts, run_id) -> ProductionGuard:
    return ProductionGuard(
        "box",
        production,
        state_dir=state,
        ssh=ssh_target(host(sshd)),
        run_id=run_id,
        restore_by=restore_by,
        alert=alerts,
        poll_interval_s=0.2,
        # the Box's restore fires after the controller's own restore (a restore's time already past
        # would fire it at once, mid-benchmark, taking the controller's turn)
        fallback_min_delay_s=FALLBACK_DELAY_S,
    )


def wait_back(url: str, by: datetime) -> datetime:
    """When production answered again; fails when it did not by ``by`` (and a margin for the poll)."""
    while not healthy(url):
        assert datetime.now(UTC) < by + timedelta(seconds=5), f"production not back by {by:%H:%M:%S}"
        time.sleep(0.2)
    return datetime.now(UTC)


@pytest.fixture
def hook():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def far():
    """A directory the Box's user writes (tmp_path is root's alone)."""
    d = Path(tempfile.mkdtemp(prefix="strix-restore-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def later_run_says_the_fallback_restored_it(sshd, production, state, hook) -> None:
    alerts = ProductionAlerts(hook.url)
    nxt = guard(sshd, production, state, None, alerts, "next")
    nxt.check_marker()
    texts = [b["text"] for b in hook.bodies]
    assert any("restored by the fallback on the Box" in t for t in texts), texts
    assert not nxt.marker.exists()


CONTROLLER = textwrap.dedent(
    """
    import json, sys, time
    from datetime import datetime
    from strix_pipeline.config import ProductionEngine
    from strix_pipeline.hosts.box.production import ProductionGuard
    from strix_pipeline.hosts.docker.ssh import SshTarget
    a = json.loads(sys.argv[1])
    g = ProductionGuard("box", ProductionEngine(**a["production"]), state_dir=a["state"],
        ssh=SshTarget(**a["ssh"]), run_id="killed", restore_by=datetime.fromisoformat(a["restore_by"]),
        fallback_min_delay_s=1)
    with g:
        print("stopped", flush=True)
        time.sleep(600)  # the benchmark, never finished
    """
)


def test_a_controller_killed_mid_benchmark_leaves_production_to_the_box_which_restores_it(
    box_sshd, box_key, production, hook, tmp_path
):
    name, url = production
    restore_by = datetime.now(UTC) + timedelta(seconds=OUTAGE_S)
    t = ssh_target(host(box_sshd))
    args = {
        "production": engine(name, url).model_dump(mode="json"),
        "state": str(tmp_path),
        "ssh": t.__dict__,
        "restore_by": restore_by.isoformat(),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, json.dumps(args)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
        start_new_session=True,
    )
    try:
        assert child.stdout.readline().strip() == "stopped"
        assert not healthy(url)  # production is down for the benchmark
        os.killpg(child.pid, signal.SIGKILL)  # the controller dies, nothing of it restores anything
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert wait_back(url, restore_by) <= restore_by + timedelta(seconds=5)
    later_run_says_the_fallback_restored_it(box_sshd, engine(name, url), tmp_path, hook)


def test_ssh_dropped_at_the_restore_alerts_and_the_box_restores_production_itself(
    box_sshd, box_key, production, hook, tmp_path
):
    name, url = production
    restore_by = datetime.now(UTC) + timedelta(seconds=OUTAGE_S)
    g = guard(box_sshd, engine(name, url), tmp_path, restore_by, ProductionAlerts(hook.url), "dropped")
    try:
        with g:
            assert not healthy(url)
            box_sshd.stop()  # the link and the listener gone: the controller's start cannot reach the Box
        assert g.restored is False
        assert any("PRODUCTION NOT RESTORED" in b["text"] for b in hook.bodies), hook.bodies
        wait_back(url, restore_by)
    finally:
        if box_sshd.process is None:
            box_sshd.start()
    later_run_says_the_fallback_restored_it(box_sshd, engine(name, url), tmp_path, hook)


def test_a_first_start_that_fails_is_alerted_and_the_box_starts_production_again(
    box_sshd, box_key, production, hook, tmp_path, far
):
    name, url = production
    once = far / "failed-once"
    start = [
        "sh",
        "-c",
        f"if [ ! -e {once} ]; then touch {once}; echo first start fails >&2; exit 1; fi; docker start {name}",
    ]
    restore_by = datetime.now(UTC) + timedelta(seconds=OUTAGE_S)
    g = guard(box_sshd, engine(name, url, start), tmp_path, restore_by, ProductionAlerts(hook.url), "failing")
    with g:
        assert not healthy(url)
    assert g.restored is False and "first start fails" in (g.restore_error or "")
    assert any("PRODUCTION NOT RESTORED" in b["text"] for b in hook.bodies), hook.bodies
    wait_back(url, restore_by)
    later_run_says_the_fallback_restored_it(box_sshd, engine(name, url, start), tmp_path, hook)


def test_production_restored_by_the_controller_disarms_the_box_restore(
    box_sshd, box_key, production, hook, tmp_path
):
    name, url = production
    g = guard(
        box_sshd,
        engine(name, url),
        tmp_path,
        datetime.now(UTC) + timedelta(seconds=8),
        ProductionAlerts(hook.url),
        "fine",
    )
    with g:
        assert not healthy(url)
    assert g.restored is True and not g.marker.exists() and hook.bodies == []
    subprocess.run(["docker", "stop", "-t", "1", name], check=True, capture_output=True)
    time.sleep(8)  # past the time the disarmed restore would have fired
    assert not healthy(url), "a disarmed restore started production"
    subprocess.run(["docker", "start", name], check=True, capture_output=True)
