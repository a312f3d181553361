"""The Box's restore under a real systemd (support/systemd_box.py): production a user unit of the Box
user wrapping ``docker run`` (``Restart=always``), the controller reaching it over ssh as on a Box.

- the controller SIGKILLed mid-benchmark with an engine container running: the ``systemd-run --user``
  timer armed before the stop fires after every ssh session of the user is gone (linger keeps the
  user's manager), removes the engine, starts production and records "restored" once it answered;
- linger off: ``strix doctor``'s check names ``sudo loginctl enable-linger bench`` and a run is
  refused before production stops (on the code before, the timer was armed in the ssh session's
  manager and production stopped);
- the ``Restart=always`` unit, stopped through its unit, stays down through the benchmark and comes
  back after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta

import pytest
from support.bench_docker import healthy
from support.box_sim import wait_healthy
from support.infra import free_port
from support.systemd_box import PRODUCTION_UNIT, USER, SystemdBox

from strix_pipeline.config import DockerHostConfig, ProductionEngine
from strix_pipeline.doctor.restore import _restore
from strix_pipeline.hosts.box import restore_guard
from strix_pipeline.hosts.box.production import ProductionGuard
from strix_pipeline.hosts.box.restore_ready import LINGER
from strix_pipeline.hosts.docker.ssh import ssh_target
from strix_pipeline.hosts.errors import EngineStartError

pytestmark = [pytest.mark.docker, pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(300)]

KEY_ENV = "STRIX_TEST_SYSTEMD_BOX_KEY"
HEALTH_S = 10


def host(box: SystemdBox, production: ProductionEngine | None = None) -> DockerHostConfig:
    return DockerHostConfig(
        kind="docker",
        docker_host=box.url,
        ssh_key_path_env=KEY_ENV,
        ssh_known_hosts=str(box.known_hosts),
        production=production,
    )


def unit_production(url: str) -> ProductionEngine:
    return ProductionEngine(
        stop_command=["systemctl", "--user", "stop", PRODUCTION_UNIT],
        start_command=["systemctl", "--user", "start", PRODUCTION_UNIT],
        unit=PRODUCTION_UNIT,
        health_url=url,
        health_timeout_s=HEALTH_S,
    )


@pytest.fixture
def unit(systemd_box: SystemdBox, monkeypatch: pytest.MonkeyPatch):
    """Production running as the Box user's unit on a free port; yields its health URL."""
    monkeypatch.setenv(KEY_ENV, str(systemd_box.key))
    port = free_port()
    name = f"strix-test-systemd-production-{port}"
    systemd_box.user_shell(
        f"printf 'NAME={name}\\nIMAGE={systemd_box.busybox}\\nPORT={port}\\n' "
        "> ~/.config/strix-production.env && "
        f"systemctl --user reset-failed {PRODUCTION_UNIT} 2>/dev/null; "
        f"systemctl --user start {PRODUCTION_UNIT}"
    )
    url = f"http://127.0.0.1:{port}/health"
    wait_healthy(url, 30)
    yield url
    systemd_box.user_shell(f"systemctl --user stop {PRODUCTION_UNIT}", check=False)
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def exists(container: str) -> bool:
    return subprocess.run(["docker", "inspect", container], capture_output=True, check=False).returncode == 0


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
        fallback_min_delay_s=a["delay_s"])
    with g:
        print("stopped", g.armed, flush=True)
        time.sleep(600)  # the benchmark, never finished
    """
)


def test_a_controller_killed_mid_benchmark_leaves_production_to_the_boxs_systemd_timer(
    systemd_box, unit, tmp_path
):
    box, url = systemd_box, unit
    delay_s = 10  # the timer fires this long after the arm: well after the controller is dead
    restore_by = datetime.now(UTC) + timedelta(seconds=delay_s + 25)
    production = unit_production(url)
    args = {
        "production": production.model_dump(mode="json"),
        "state": str(tmp_path),
        "ssh": ssh_target(host(box)).__dict__,
        "restore_by": restore_by.isoformat(),
        "delay_s": delay_s,
    }
    engine = f"strix-test-systemd-engine-{box.port}"
    child = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, json.dumps(args)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
        start_new_session=True,
    )
    try:
        said = child.stdout.readline().strip()
        assert said.startswith("stopped systemd strix-restore-box.timer --user"), said
        assert not healthy(url) and box.unit_state() != "active"
        # the benchmark's engine, as the pipeline labels it, running when the controller dies
        labels = ["--label", "strix.managed=true", "--label", "strix.run_id=killed"]
        engine_id = subprocess.run(
            [
                "docker",
                "run",
                "-d",
                "--name",
                engine,
                "--network",
                "none",
                *labels,
                box.busybox,
                "sleep",
                "600",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        os.killpg(child.pid, signal.SIGKILL)  # the controller dies, nothing of it restores anything
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        if child.stdout:
            child.stdout.close()
    try:
        # every ssh session of the user is gone: only linger keeps the timer's manager
        deadline = time.monotonic() + 20
        while "bench" in box.root("loginctl", "list-sessions", "--no-legend", check=False):
            assert time.monotonic() < deadline, box.root("loginctl", "list-sessions", check=False)
            time.sleep(0.2)
        assert not healthy(url) and box.unit_state() != "active"  # Restart=always did not bring it back
        while not healthy(url):
            assert datetime.now(UTC) < restore_by + timedelta(seconds=5), (
                f"production not back by {restore_by:%H:%M:%S}:\n{box.journal()[-4000:]}"
            )
            time.sleep(0.2)
        assert box.unit_state() == "active"
        assert not exists(engine), "the engine the pipeline left runs beside production"
        nxt = ProductionGuard("box", production, state_dir=tmp_path, ssh=ssh_target(host(box)), run_id="next")
        # the Box's script records "answered" after its own poll (once a second) and unarms last: the
        # record is read (once: reading takes it) after that
        armed = (
            f"${{XDG_STATE_HOME:-$HOME/.local/state}}/strix-pipeline/{restore_guard.unit_name('box')}.armed"
        )
        deadline = time.monotonic() + 15
        while box.user_shell(f'test -f "{armed}" && echo armed || true').strip() == "armed":
            assert time.monotonic() < deadline, box.journal()[-4000:]
            time.sleep(0.5)
        fired = nxt.fired()
        assert fired is not None and fired.ok, fired
        assert any("removed managed containers" in a and engine_id[:12] in a for a in fired.attempts), fired
        assert fired.attempts[-1].endswith(f"{url} answered"), fired
    finally:
        subprocess.run(["docker", "rm", "-f", engine], capture_output=True, check=False)


def test_linger_off_is_named_by_the_doctor_and_refuses_the_run_before_production_stops(
    systemd_box, unit, tmp_path
):
    box, url = systemd_box, unit
    production = unit_production(url)
    box.root("loginctl", "disable-linger", USER)
    try:
        checks = list(_restore("box", host(box, production), ssh_target(host(box, production))))
        linger = next(c for c in checks if c.name == LINGER)
        assert not linger.ok and linger.required, linger
        assert linger.fix == f"sudo loginctl enable-linger {USER}", linger
        g = ProductionGuard(
            "box",
            production,
            state_dir=tmp_path,
            ssh=ssh_target(host(box)),
            run_id="no-linger",
            restore_by=datetime.now(UTC) + timedelta(minutes=5),
        )
        with pytest.raises(EngineStartError) as e:
            with g:
                pytest.fail("the benchmark ran without a restore that outlives the controller")
        assert e.value.status == "failed_guard"
        assert f"sudo loginctl enable-linger {USER}" in e.value.reason
        assert "production was not stopped" in e.value.reason
        assert not g.stopped and healthy(url) and box.unit_state() == "active"
        assert not g.marker.exists()
    finally:
        box.root("loginctl", "enable-linger", USER)
        box.wait_user_manager()
    checks = list(_restore("box", host(box, production), ssh_target(host(box, production))))
    assert next(c for c in checks if c.name == LINGER).ok


def test_a_restart_always_unit_stopped_through_its_unit_stays_down_through_the_run_and_comes_back(
    systemd_box, unit, tmp_path
):
    box, url = systemd_box, unit
    g = ProductionGuard(
        "box",
        unit_production(url),
        state_dir=tmp_path,
        ssh=ssh_target(host(box)),
        run_id="restart-always",
        restore_by=datetime.now(UTC) + timedelta(minutes=5),
        poll_interval_s=0.2,
    )
    seen: list[str] = []
    with g:
        for _ in range(8):  # the benchmark: well past RestartSec=1
            seen.append(box.unit_state())
            assert not healthy(url), "production came back mid-run"
            time.sleep(0.5)
    assert "active" not in seen and "activating" not in seen, seen
    assert g.restored is True and healthy(url) and box.unit_state() == "active"
    assert not [a for a in g.alerts if "came back by itself" in a], g.alerts
    assert box.user_shell(f"systemctl --user show {PRODUCTION_UNIT} -p Restart").strip() == "Restart=always"
