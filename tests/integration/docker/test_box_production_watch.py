"""The production watch on the Box simulator: production stopped by hand on the Box (``docker stop`` over
the real sshd, no run anywhere) is reported on a webhook receiver on loopback once it has been down longer
than its grace, and reported back once it is started again.

Both callers are checked side by side on the same outage: the plain function the sensor is a thin
caller of (``hosts.box.production_watch.watch``, its alerts sent by ``ProductionAlerts``), and the
Dagster sensor itself, evaluated as the daemon does (``build_sensor_context``, a real on-disk instance,
its state carried in the cursor from one tick to the next). The grace is two seconds here.
"""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from support.bench_docker import healthy
from support.box_images import production_httpd
from support.box_sim import KEY_ENV, wait_healthy
from support.notify import Receiver
from support.pipeline_helpers import write_config

from assets.resources import StrixConfigResource
from schedules import build_production_watch
from strix_pipeline.config_load import load_config
from strix_pipeline.hosts.box.production import http_healthy, ssh_prefix
from strix_pipeline.hosts.box.production_alerts import ProductionAlerts
from strix_pipeline.hosts.box.production_watch import ALERTED, DOWN, UP, WatchState, watch
from strix_pipeline.hosts.docker.ssh import ssh_target

pytestmark = [pytest.mark.docker, pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(240)]

GRACE_S = 2


def box_toml(tmp_path: Path, sshd, name: str, url: str) -> Path:
    """The tests' Box config, reached over the simulator's sshd, its production the httpd container."""
    path = write_config(tmp_path, box=True)
    text = path.read_text().replace(
        'docker_host = "unix:///nonexistent/docker.sock"',
        f'docker_host = "{sshd.url}"\nssh_key_path_env = "{KEY_ENV}"\nssh_known_hosts = "{sshd.known_hosts}"',
    )
    assert sshd.url in text
    path.write_text(
        text
        + f'\n[hosts.box.production]\ncontainer = "{name}"\nhealth_url = "{url}"\n'
        + f"health_timeout_s = 10\nwatch_grace_s = {GRACE_S}\n"
    )
    return path


class Sensor:
    """The production watch sensor ticked as the daemon ticks it, its cursor kept between ticks."""

    def __init__(self, path: Path, instance: dg.DagsterInstance) -> None:
        sensor = build_production_watch(load_config(path))
        assert sensor is not None
        self.sensor, self.path, self.instance = sensor, path, instance
        self.cursor: str | None = None

    def tick(self) -> str:
        ctx = dg.build_sensor_context(
            instance=self.instance,
            cursor=self.cursor,
            resources={"strix": StrixConfigResource(config_path=str(self.path))},
        )
        result = self.sensor(ctx)
        assert isinstance(result, dg.SkipReason)
        self.cursor = ctx.cursor
        return result.skip_message or ""


def test_production_stopped_by_hand_is_alerted_after_its_grace_and_reported_back(
    box_sshd, box_key, busybox, client, tmp_path, monkeypatch
):
    lib_hook, sensor_hook = Receiver(), Receiver()
    monkeypatch.setenv("STRIX_WEBHOOK_URL", sensor_hook.url)  # the sensor's webhook (the config's variable)
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = dg.DagsterInstance.local_temp(str(home))
    try:
        with production_httpd(client, busybox, "strix-test-watch-production") as (name, url):
            path = box_toml(tmp_path, box_sshd, name, url)
            config = load_config(path)
            box = ssh_target(config.hosts["box"])
            assert box is not None
            alerts = ProductionAlerts(lib_hook.url)
            states: dict[str, WatchState] = {}
            sensor = Sensor(path, instance)

            def check() -> tuple[str, str]:
                """One check by the plain function (its alerts sent), then one tick of the sensor."""
                nonlocal states
                steps = watch(
                    {"box": config.hosts["box"].production},
                    states,
                    now=datetime.now(UTC),
                    state_dir=config.state_dir(),
                    healthy=http_healthy,
                )
                for s in steps.values():
                    if s.alert:
                        alerts(s.alert)
                states = {h: s.state for h, s in steps.items()}
                return steps["box"].status, sensor.tick()

            def by_hand(verb: str) -> None:
                """What the Box's owner types on the Box: ``docker stop`` / ``docker start``."""
                argv = ssh_prefix(box, ["docker", verb, name])
                done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
                assert done.returncode == 0, done.stderr

            status, said = check()
            assert (status, said) == (UP, "box: production healthy")
            assert lib_hook.bodies == sensor_hook.bodies == []

            by_hand("stop")
            assert not healthy(url)
            status, said = check()
            # within the grace: nothing sent yet, the tick says since when it is not answering
            assert status == DOWN and said.startswith(f"box: production not answering {url}"), said
            assert lib_hook.bodies == sensor_hook.bodies == []

            time.sleep(GRACE_S + 0.5)
            status, said = check()
            assert status == ALERTED
            for hook in (lib_hook, sensor_hook):
                (sent,) = [b["text"] for b in hook.bodies]
                assert sent.startswith(":rotating_light: production on host box has been down for "), sent
                assert f"{url} has not answered 200 since" in sent and "outside any run" in sent, sent
                assert f"(grace {GRACE_S} s)" in sent, sent
            assert said == sensor_hook.bodies[0]["text"].removeprefix(":rotating_light: ")

            status, said = check()  # still down: said once, not again
            assert status == ALERTED and "box: production still down" in said, said
            assert len(lib_hook.bodies) == len(sensor_hook.bodies) == 1

            by_hand("start")
            wait_healthy(url)
            status, said = check()
            assert status == UP
            for hook in (lib_hook, sensor_hook):
                assert len(hook.bodies) == 2, hook.bodies
                back = hook.bodies[1]["text"]
                assert back.startswith(":rotating_light: production on host box is back: "), back
                assert f"{url} answers again at" in back and "down since" in back, back
            assert said == sensor_hook.bodies[1]["text"].removeprefix(":rotating_light: ")
            assert WatchState.read(sensor.cursor) == {"box": WatchState()} and states == {"box": WatchState()}

            status, said = check()  # back and quiet
            assert (status, said) == (UP, "box: production healthy")
            assert len(lib_hook.bodies) == len(sensor_hook.bodies) == 2
    finally:
        lib_hook.close()
        sensor_hook.close()
        instance.dispose()
