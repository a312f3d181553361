"""Production engine: stopped before a run, restored on every exit path, marker, maintenance window."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from strix_pipeline.config import DockerHostConfig, ProductionEngine, validate_cron
from strix_pipeline.hosts.box import production as prod
from strix_pipeline.hosts.docker.ssh import ssh_target
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning import cron as window

# as in tests/reliability/test_ssh_transport.py: the key's variable, and a distinctive directory name
# for the key file (its path is a secret no message may show)
KEY_ENV = "STRIX_TEST_SSH_KEY"
SECRET_DIR = "secret-sshkeys-5d1e"


class Runner:
    def __init__(self, fail_on: str | None = None):
        self.calls: list[list[str]] = []
        self.shell: list[str] = []  # the fallback's scripts (arm, disarm, read), kept apart
        self.fail_on = fail_on

    def __call__(self, argv, **kw):
        if argv[:2] == ["sh", "-c"] or (argv[0] == "ssh" and argv[-1].startswith("sh -c")):
            self.shell.append(argv[-1])
            return subprocess.CompletedProcess(argv, 0, "armed pid 1\n", "")
        self.calls.append(argv)
        code = 1 if self.fail_on and self.fail_on in " ".join(argv) else 0
        return subprocess.CompletedProcess(argv, code, "", "boom" if code else "")


class Health:
    def __init__(self, up: bool = True):
        self.up = up
        self.asked = 0

    def __call__(self, url):
        self.asked += 1
        return self.up


def commands() -> ProductionEngine:
    return ProductionEngine(
        stop_command=["systemctl", "stop", "llama"],
        start_command=["systemctl", "start", "llama"],
        unit="llama.service",
        health_url="http://127.0.0.1:9/health",
        health_timeout_s=1,
    )


def test_commands_stop_then_restore_even_when_the_run_fails(tmp_path):
    runner, health = Runner(), Health()
    guard = prod.ProductionGuard(
        "box", commands(), state_dir=tmp_path, runner=runner, healthy=health, poll_interval_s=0.01
    )
    with pytest.raises(RuntimeError, match="mid-run"):
        with guard:
            assert runner.calls == [["systemctl", "stop", "llama"]]
            raise RuntimeError("mid-run")
    assert runner.calls[-1] == ["systemctl", "start", "llama"]
    assert guard.restored is True and not prod.marker_path(tmp_path, "box").exists()


def test_commands_run_over_ssh_for_an_ssh_host(tmp_path, monkeypatch):
    from strix_pipeline.hosts.docker.ssh import ssh_target

    key = tmp_path / "id_box"
    key.write_text("a key\n")
    monkeypatch.setenv("STRIX_TEST_BOX_KEY", str(key))
    host = DockerHostConfig(
        kind="docker",
        docker_host="ssh://bench@box:2222",
        ssh_key_path_env="STRIX_TEST_BOX_KEY",
        ssh_connect_timeout_s=7,
        ssh_alive_interval_s=4,
    )
    runner = Runner()
    guard = prod.ProductionGuard(
        "box", commands(), state_dir=tmp_path, runner=runner, healthy=Health(), ssh=ssh_target(host)
    )
    with guard:
        pass
    argv = runner.calls[0]
    # the host's one ssh command line: no prompt, the key from the variable, bounded connect and drop
    options = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-o"]
    assert {"BatchMode=yes", "ConnectTimeout=7", "ServerAliveInterval=4", "ServerAliveCountMax=3"} <= set(
        options
    )
    assert {"StrictHostKeyChecking=yes", "IdentitiesOnly=yes"} <= set(options)
    assert argv[argv.index("-i") + 1] == str(key)
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "bench"
    assert argv[0] == "ssh" and argv[-3:] == ["--", "box", "systemctl stop llama"]
    assert runner.calls[-1][-1] == "systemctl start llama"


def test_a_user_from_the_environment_is_used_but_shown_only_as_its_variable(monkeypatch, tmp_path):
    from strix_pipeline.hosts.errors import EngineStartError

    keyfile = tmp_path / SECRET_DIR / "id"
    keyfile.parent.mkdir()
    keyfile.write_text("key\n")
    monkeypatch.setenv("STRIX_TEST_SSH_USER", "secret-user-9a1f")
    monkeypatch.setenv(KEY_ENV, str(keyfile))
    host = DockerHostConfig(
        kind="docker",
        docker_host="ssh://{user}@box.lan:2200",
        ssh_user_env="STRIX_TEST_SSH_USER",
        ssh_key_path_env=KEY_ENV,
    )
    t = ssh_target(host)
    assert t is not None
    argv = t.argv("docker info")
    assert argv[argv.index("-l") + 1] == "secret-user-9a1f" and argv[argv.index("-i") + 1] == str(keyfile)
    assert t.display == "ssh://<$STRIX_TEST_SSH_USER>@box.lan:2200"
    said = t.redact(f"secret-user-9a1f@box.lan: Permission denied (publickey). Load key {keyfile}: bad")
    assert said == f"<$STRIX_TEST_SSH_USER>@box.lan: Permission denied (publickey). Load key ${KEY_ENV}: bad"

    monkeypatch.delenv("STRIX_TEST_SSH_USER")
    with pytest.raises(EngineStartError, match=r"needs the user in \$STRIX_TEST_SSH_USER"):
        ssh_target(host)


def test_unrestored_production_marks_and_blocks_the_next_run_until_healthy(tmp_path, caplog):
    health = Health(up=False)
    guard = prod.ProductionGuard(
        "box",
        commands(),
        state_dir=tmp_path,
        runner=Runner(),
        healthy=health,
        run_id="r7",
        poll_interval_s=0.05,
    )
    with guard:
        pass
    assert guard.restored is False and "did not answer 200" in guard.restore_error
    assert "PRODUCTION NOT RESTORED" in caplog.text
    marker = json.loads(prod.marker_path(tmp_path, "box").read_text())
    assert marker["run_id"] == "r7"
    nxt = prod.ProductionGuard("box", commands(), state_dir=tmp_path, runner=Runner(), healthy=health)
    with pytest.raises(EngineStartError) as e:
        with nxt:
            pass
    assert e.value.status == "failed_guard" and "r7" in e.value.reason
    health.up = True
    with prod.ProductionGuard("box", commands(), state_dir=tmp_path, runner=Runner(), healthy=health):
        pass
    assert not prod.marker_path(tmp_path, "box").exists()


def test_failing_start_command_is_not_restored(tmp_path):
    guard = prod.ProductionGuard(
        "box", commands(), state_dir=tmp_path, runner=Runner(fail_on="start"), healthy=Health()
    )
    with guard:
        pass
    assert guard.restored is False and "exited 1" in guard.restore_error


def test_no_production_is_a_no_op(tmp_path):
    with prod.ProductionGuard("local", None, state_dir=tmp_path) as g:
        pass
    assert g.restored is None and not g.stopped


def H(**kw) -> DockerHostConfig:
    return DockerHostConfig(kind="docker", docker_host="unix:///x.sock", **kw)


@pytest.mark.parametrize(
    ("now", "inside"),
    [
        (datetime(2026, 11, 30, 3, 0, tzinfo=UTC), True),  # Monday 03:00, the schedule fires
        (datetime(2026, 11, 30, 8, 59, tzinfo=UTC), True),
        (datetime(2026, 11, 30, 9, 0, tzinfo=UTC), False),  # 6 h later: closed
        (datetime(2026, 11, 30, 2, 59, tzinfo=UTC), False),
        (datetime(2026, 12, 1, 4, 0, tzinfo=UTC), False),  # Tuesday
    ],
)
def test_maintenance_window_default_schedule(now, inside):
    if inside:
        assert prod.check_maintenance_window(H(), "0 3 * * 1", now=now) == datetime(
            2026, 11, 30, 3, 0, tzinfo=UTC
        )
    else:
        with pytest.raises(EngineStartError, match="outside the maintenance window"):
            prod.check_maintenance_window(H(), "0 3 * * 1", now=now)
        assert prod.check_maintenance_window(H(), "0 3 * * 1", now=now, force=True) is None


def test_maintenance_window_host_cron_timezone_and_names():
    h = H(maintenance_window="30 22 * * sat,sun", maintenance_window_hours=4)
    # Sunday 00:15 UTC is inside the window that opened Saturday 22:30
    assert prod.check_maintenance_window(h, "0 3 * * 1", now=datetime(2026, 11, 29, 0, 15, tzinfo=UTC))
    with pytest.raises(EngineStartError):
        prod.check_maintenance_window(h, "0 3 * * 1", now=datetime(2026, 12, 1, 0, 15, tzinfo=UTC))  # Tuesday
    # 03:00 in Berlin is 02:00 UTC in winter
    berlin = datetime(2026, 11, 30, 2, 30, tzinfo=UTC)
    assert prod.check_maintenance_window(H(), "0 3 * * 1", now=berlin, timezone="Europe/Berlin")


def test_cron_fields():
    """The fields read as cron (and Dagster) read them: steps, ranges, lists, names, 0 and 7 both Sunday."""
    expr, tz, hour = "*/15 1-3 1,15 * 0", "UTC", timedelta(minutes=1)

    def fires(t: datetime) -> bool:
        return window.last_fire_time(expr, t.replace(tzinfo=UTC), tz, within=hour) == t.replace(tzinfo=UTC)

    assert fires(datetime(2026, 11, 15, 2, 30))  # the 15th, a Sunday anyway
    # day of month and day of week both restricted: either matches (cron semantics)
    assert fires(datetime(2026, 11, 22, 2, 30))  # a Sunday
    assert fires(datetime(2026, 12, 1, 2, 30))  # the 1st, a Tuesday
    assert not fires(datetime(2026, 12, 2, 2, 30))
    assert not fires(datetime(2026, 11, 22, 2, 31)) and not fires(datetime(2026, 11, 22, 4, 0))
    sunday = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
    for sun in ("0 0 * * 7", "0 0 * * 0", "0 0 * * sun"):
        assert window.last_fire_time(sun, sunday, within=hour) == sunday
    with pytest.raises(ValueError):
        validate_cron("0 25 * * *")
    with pytest.raises(ValueError):
        validate_cron("0 3 * *")
    with pytest.raises(ValueError, match="maintenance_window"):
        H(maintenance_window="0 3 * * mon-")


class Container:
    """docker-py's container as the guard uses it, its calls in order; a start that fails if asked."""

    def __init__(self, policy: str, start_fails: bool):
        self.status = "running"
        self.attrs = {"HostConfig": {"RestartPolicy": {"Name": policy, "MaximumRetryCount": 0}}}
        self.start_fails = start_fails
        self.calls: list[tuple] = []

    def update(self, restart_policy):
        self.calls.append(("update", restart_policy["Name"]))

    def stop(self, timeout=None):
        self.calls.append(("stop",))
        self.status = "exited"

    def start(self):
        self.calls.append(("start",))
        if self.start_fails:
            raise RuntimeError("start refused: out of memory")
        self.status = "running"


class Client:
    def __init__(self, container: Container):
        self.containers = type("Containers", (), {"get": lambda _self, name: container})()


@pytest.mark.parametrize("start_fails", [False, True])
def test_production_gets_its_restart_policy_back_before_it_is_started(tmp_path, start_fails):
    # a start that fails must still leave production its own policy: a reboot or a dockerd restart
    # before the next run then brings it back
    container = Container("always", start_fails)
    production = ProductionEngine(
        container="llama", health_url="http://127.0.0.1:9/health", health_timeout_s=1
    )
    guard = prod.ProductionGuard(
        "box",
        production,
        state_dir=tmp_path,
        client=Client(container),
        runner=Runner(),
        healthy=Health(),
        poll_interval_s=0.01,
    )
    guard.stop()
    assert container.calls == [("update", "no"), ("stop",)]
    guard.restore()
    assert container.calls[2:] == [("update", "always"), ("start",)]
