"""The Box serves its users between runs: stop production before a benchmark, always bring it back.

``with ProductionGuard(...)`` stops the host's production engine (a container, or stop/start
commands such as a systemd unit) and, on every exit path -- success, failure, cancellation --
starts it again and waits for its health URL. Production never depends on the controller alone:

- before the stop a marker file is written here and a restore is armed on the Box itself
  (hosts/box/restore_guard.py) for the window's end; the controller disarms it once it restored
  production, so a controller killed mid-benchmark, an ssh link dropped at the restore or a failed
  start leave it armed and the Box starts production by itself;
- production's own restart policy (a container's ``HostConfig.RestartPolicy``) is suspended for the
  benchmark and put back after it (by the fallback too), so it never comes back mid-benchmark;
  one that came back anyway is said;
- a later run that finds the marker restores production before anything else (when it is down) and
  says what happened; only when that restore fails does it refuse;
- ``alert`` (hosts/box/production_alerts.py: the webhook and the run's log) is told when production is
  down beyond its planned outage, when a restore failed and when the fallback restored it.

Runs start only inside the maintenance window unless forced.
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from strix_pipeline.config import DockerHostConfig, ProductionEngine
from strix_pipeline.hosts.box import restore_guard
from strix_pipeline.hosts.box.marker import HELD_FOR_NIGHT, marker_path, when
from strix_pipeline.hosts.docker.ssh import SshTarget
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning.deadline import restore_time
from strix_pipeline.planning.window import window_at

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- maintenance window


def check_maintenance_window(
    host: DockerHostConfig,
    default_schedule: str,
    *,
    now: datetime | None = None,
    timezone: str = "UTC",
    force: bool = False,
) -> datetime | None:
    """Refuse (``failed_guard``) outside the host's window; returns the window's start when inside.

    The window starts at each fire time of ``host.maintenance_window`` (default: the schedule), read
    as Dagster reads the schedule's cron (:mod:`strix_pipeline.planning.cron`), and lasts
    ``host.maintenance_window_hours`` elapsed hours. ``force`` (a manual run) skips the check.
    """
    if force:
        return None
    # the rule is planning's, as a value; refusing the run with it is the runner's
    check = window_at(host, default_schedule, now or datetime.now(UTC), timezone)
    if not check.open:
        raise EngineStartError("failed_guard", f"{check.reason}; force the run to override")
    return check.window.start if check.window else None


# ---------------------------------------------------------------- production engine


def ssh_prefix(ssh: SshTarget | None, argv: list[str]) -> list[str]:
    """A production command run where the engine lives: over ssh (the host's key, known_hosts and
    timeouts, hosts/docker/ssh.py) for an ``ssh://`` host, else here as is."""
    return ssh.argv(shlex.join(argv)) if ssh is not None else argv


def http_healthy(url: str, timeout_s: float = 5.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


# a forced run (no window) plans an outage of the default window's length
DEFAULT_OUTAGE = timedelta(hours=6)
NO_POLICY = ("", "no")


def policy_text(policy: dict[str, Any]) -> str:
    """``always``, ``on-failure:3``: as ``docker update --restart`` takes it."""
    name = str(policy.get("Name") or "no")
    count = int(policy.get("MaximumRetryCount") or 0)
    return f"{name}:{count}" if name == "on-failure" and count else name


def policy_arg(policy: dict[str, Any]) -> dict[str, Any]:
    """docker-py's ``restart_policy``: a retry count only with on-failure (the daemon refuses it else)."""
    name = str(policy.get("Name") or "no")
    out: dict[str, Any] = {"Name": name}
    if name == "on-failure":
        out["MaximumRetryCount"] = int(policy.get("MaximumRetryCount") or 0)
    return out


class ProductionGuard:
    """Context manager around a benchmark run on a host that serves users.

    ``ssh`` is the host's :class:`SshTarget` (``hosts.ssh.ssh_target``) when it is reached over ssh:
    stop and start commands run there, and so does the fallback restore. ``state_dir`` holds the
    marker. ``restore_by``: the end of the planned outage (the window's end; default 6 h after the
    stop): the fallback starts production so that it answers by then. ``alert``: told every message a
    person must hear (hosts/box/production_alerts.py); the messages are kept in ``alerts`` too.
    """

    def __init__(
        self,
        host_name: str,
        production: ProductionEngine | None,
        *,
        state_dir: str | Path,
        client: Any | None = None,
        ssh: SshTarget | None = None,
        run_id: str | None = None,
        runner: Callable[..., subprocess.CompletedProcess] = subprocess.run,
        healthy: Callable[[str], bool] = http_healthy,
        poll_interval_s: float = 1.0,
        stop_timeout_s: int = 60,
        command_timeout_s: float = 300,
        restore_by: datetime | None = None,
        alert: Callable[[str], None] | None = None,
        fallback_min_delay_s: float = 60.0,
        fallback: bool = True,
    ) -> None:
        self.host_name = host_name
        self.production = production
        self.marker = marker_path(state_dir, host_name)
        self.client = client
        self.ssh = ssh
        self.run_id = run_id
        self.runner = runner
        self.healthy = healthy
        self.poll_interval_s = poll_interval_s
        self.stop_timeout_s = stop_timeout_s
        self.command_timeout_s = command_timeout_s
        self.restore_by = restore_by
        self.alert_to = alert
        self.fallback_min_delay_s = fallback_min_delay_s
        self.fallback = fallback
        self.stopped = False
        self.restored: bool | None = None  # None: nothing to restore
        # when the Box's users lost their engine and when it answered its health URL again
        self.stopped_at: datetime | None = None
        self.restored_at: datetime | None = None
        self.restore_error: str | None = None
        self.suspended_policy: dict[str, Any] | None = None  # the container's own, while suspended
        self.armed: str | None = None  # what the Box said when the fallback was armed
        self.alerts: list[str] = []

    # -- alerts and the Box's shell

    def _alert(self, text: str) -> None:
        self.alerts.append(text)
        log.error("%s", text)
        if self.alert_to is not None:
            try:
                self.alert_to(text)
            except Exception as e:  # noqa: BLE001 - an alert that could not be sent never stops a restore
                log.warning("alert not sent: %s", e)

    def _shell(self, script: str, what: str) -> str:
        """``script`` run by ``sh -c`` on the Box (over ssh) or here; its stdout, or RuntimeError."""
        return self._checked(["sh", "-c", script], what)

    def _checked(self, argv: list[str], what: str) -> str:
        """``argv`` run where production lives (over ssh for an ``ssh://`` host); its stdout, or a
        RuntimeError naming ``what``, where, the exit status and the end of stderr (ssh's secrets
        redacted)."""
        result = self.runner(
            ssh_prefix(self.ssh, argv),
            capture_output=True,
            text=True,
            timeout=self.command_timeout_s,
            check=False,
        )
        if result.returncode != 0:
            where = f" on {self.ssh.display}" if self.ssh else ""
            stderr = self.ssh.redact(result.stderr or "") if self.ssh else result.stderr or ""
            raise RuntimeError(f"{what}{where} exited {result.returncode}: {stderr.strip()[-500:]}")
        return result.stdout or ""

    def _start_shell(self, policy: dict[str, Any] | None) -> str:
        """Production's start as the Box's shell runs it (the fallback's), its restart policy put back."""
        p = self.production
        assert p is not None
        if p.container:
            name = shlex.quote(p.container)
            back = f"docker update --restart={policy_text(policy)} {name} >/dev/null && " if policy else ""
            return f"{back}docker start {name}"
        return shlex.join(list(p.start_command or []))

    def _write_marker(self, state: str, **info: Any) -> None:
        self.marker.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "host": self.host_name,
            "run_id": self.run_id,
            "state": state,
            "at": datetime.now(UTC).isoformat(),
            "stopped_at": self.stopped_at.isoformat() if self.stopped_at else None,
            "restore_by": self.restore_by.isoformat() if self.restore_by else None,
            "restart_policy": self.suspended_policy,
            **info,
        }
        self.marker.write_text(json.dumps(body))

    # -- the fallback on the Box

    def arm(self) -> None:
        """Arm the Box's own restore for the restore's time (the planned outage's end less production's
        health timeout and the margin, planning/deadline.py: when the runs' deadline stops them), so it
        answers by the end; refuses the stop (``failed_guard``) when the Box did not take it."""
        p = self.production
        if p is None or not self.fallback:
            return
        now = datetime.now(UTC)
        restore_by = self.restore_by or now + DEFAULT_OUTAGE
        delay = max(self.fallback_min_delay_s, (restore_time(restore_by, p) - now).total_seconds())
        f = restore_guard.Fallback(
            self.host_name,
            self._start_shell(self.suspended_policy),
            int(delay),
            health_url=str(p.health_url),
            # from the firing to the outage's end: the start retried while it lasts
            window_s=int(max(p.health_timeout_s, (restore_by - now).total_seconds() - delay)),
            health_wait_s=p.health_timeout_s,
        )
        try:
            self.armed = self._shell(restore_guard.arm_script(f), "arming the restore").strip()
        except Exception as e:  # noqa: BLE001 - ssh down, no shell: production is not stopped then
            raise EngineStartError(
                "failed_guard",
                f"the restore of production could not be armed on host {self.host_name} ({e}); production "
                "was not stopped",
            ) from None
        log.info("restore armed on %s in %d s: %s", self.host_name, int(delay), self.armed)

    def disarm(self) -> None:
        if self.production is None or not self.fallback:
            return
        try:
            self._shell(restore_guard.disarm_script(self.host_name), "disarming the restore")
            self.armed = None
        except Exception as e:  # noqa: BLE001 - production is back: a fallback that fires finds it running
            log.warning(
                "the restore armed on %s was not disarmed (%s): it starts a running production",
                self.host_name,
                e,
            )

    def fired(self) -> restore_guard.Fired | None:
        """What the Box's fallback did since it was armed (read once), None when it never fired."""
        try:
            out = self._shell(restore_guard.read_fired_script(self.host_name), "reading the restore's record")
        except Exception as e:  # noqa: BLE001 - unknown: said as such
            log.warning("could not read the restore record on %s: %s", self.host_name, e)
            return None
        return restore_guard.parse_fired(out)

    # -- checks

    def check_marker(self) -> None:
        """A marker left by an earlier run (its controller killed, its restore failed): production is
        restored first, before anything else, and what happened is alerted; the run refuses only when
        production cannot be brought back. A stale marker of a healthy production is cleared."""
        if not self.marker.exists() or self.production is None:
            return
        try:
            info = json.loads(self.marker.read_text())
        except (OSError, ValueError):
            info = {}
        before = (
            f"run {info.get('run_id', '?')} stopped production on host {self.host_name} at "
            f"{info.get('stopped_at') or info.get('at', '?')}"
        )
        why = info.get("reason") or (
            "its controller never came back"
            if info.get("state") == "stopped"
            else f"it was left down for night {info.get('night')}'s {info.get('remaining', '?')} "
            "later run(s), which did not all come"
            if info.get("state") == HELD_FOR_NIGHT
            else "unknown reason"
        )
        fired = self.fired()
        if self.healthy(self.production.health_url):
            if fired is not None and fired.ok:
                self._alert(
                    f"production on host {self.host_name} was restored by the fallback on the Box "
                    f"at {fired.at} ({before}; {why}; {fired.describe()})"
                )
            elif info.get("state") in ("stopped", HELD_FOR_NIGHT):
                self._alert(
                    f"production on host {self.host_name} is healthy again, restored by neither "
                    f"the run nor the fallback ({before}; {why})"
                )
            self._put_policy_back(info.get("restart_policy"))
            self.disarm()
            log.warning("production on %s is healthy again; clearing %s", self.host_name, self.marker)
            self.marker.unlink(missing_ok=True)
            return
        said = f"; the fallback on the Box tried: {fired.describe()}" if fired is not None else ""
        self._alert(
            f"production on host {self.host_name} is DOWN beyond its planned outage (until "
            f"{info.get('restore_by') or '?'}): {before}; {why}{said}. Restoring it before "
            "anything else."
        )
        self.stopped, self.suspended_policy = True, info.get("restart_policy")
        self.stopped_at = None  # this run did not stop it: its outage is not this run's
        if self.restore():
            self._alert(
                f"production on host {self.host_name} restored by run {self.run_id} before its benchmark"
            )
            self.stopped, self.restored, self.restored_at = False, None, None
            return
        raise EngineStartError(
            "failed_guard",
            f"production on host {self.host_name} was not restored after run {info.get('run_id', '?')} "
            f"at {info.get('at', '?')} ({why}); restoring it now failed too ({self.restore_error}); it is "
            f"still not healthy at {self.production.health_url}. Restore it, then run again "
            f"(marker {self.marker}).",
        )

    # -- stop / start

    def _run(self, argv: list[str], what: str) -> None:
        self._checked(argv, f"{what} command {shlex.join(argv)}")

    def _put_policy_back(self, policy: dict[str, Any] | None) -> None:
        p = self.production
        if not policy or p is None or not p.container:
            return
        self.client.containers.get(p.container).update(restart_policy=policy_arg(policy))
        log.info("restart policy of %s put back: %s", p.container, policy_text(policy))

    def stop(self) -> None:
        p = self.production
        if p is None:
            return
        if p.container:
            import docker.errors

            try:
                c = self.client.containers.get(p.container)
            except docker.errors.NotFound:
                log.warning(
                    "production container %s not found on %s: nothing to stop", p.container, self.host_name
                )
                return
            if c.status != "running":
                log.warning("production container %s is %s, not running: left as is", p.container, c.status)
                return
            policy = ((c.attrs or {}).get("HostConfig") or {}).get("RestartPolicy") or {}
            if str(policy.get("Name") or "") not in NO_POLICY:
                self.suspended_policy = {
                    "Name": policy["Name"],
                    "MaximumRetryCount": policy.get("MaximumRetryCount") or 0,
                }
            self._write_marker("stopped")  # a controller that dies from here on leaves it for the next run
            self.arm()
            log.info("stopping production container %s on %s", p.container, self.host_name)
            self.stopped_at = datetime.now(UTC)  # users lose it as the stop begins
            self.stopped = True
            if self.suspended_policy:  # its own restart policy must not bring it back mid-benchmark
                c.update(restart_policy={"Name": "no"})
                log.info(
                    "restart policy %s of %s suspended for the benchmark",
                    policy_text(self.suspended_policy),
                    p.container,
                )
            self._write_marker("stopped")
            c.stop(timeout=self.stop_timeout_s)
        else:
            self._write_marker("stopped")
            self.arm()
            log.info("stopping production on %s: %s", self.host_name, p.stop_command)
            self.stopped_at = datetime.now(UTC)
            self.stopped = True  # a half-run stop command still needs the start after it
            self._write_marker("stopped")
            self._run(list(p.stop_command or []), "stop")

    def _came_back_by_itself(self) -> bool:
        p = self.production
        assert p is not None
        if p.container:
            try:
                return self.client.containers.get(p.container).status == "running"
            except Exception:  # noqa: BLE001 - not readable: the start below says more
                return False
        return self.healthy(p.health_url)

    def restore(self) -> bool:
        """Start production again, put its restart policy back and wait for its health URL; disarm the
        Box's fallback once healthy. On failure: alerted, marked, the fallback left armed."""
        p = self.production
        if p is None or not self.stopped:
            return True
        try:
            if self.stopped_at is not None and self._came_back_by_itself():
                self._alert(
                    f"production on host {self.host_name} came back by itself during run "
                    f"{self.run_id}'s benchmark (a restart policy or another service started it): "
                    "the run measured beside it"
                )
            if p.container:
                c = self.client.containers.get(p.container)
                # the policy first: a start that fails still leaves production its own policy, so a
                # reboot or a dockerd restart before the next run brings it back
                if self.suspended_policy:
                    c.update(restart_policy=policy_arg(self.suspended_policy))
                c.start()
            else:
                self._run(list(p.start_command or []), "start")
            deadline = time.monotonic() + p.health_timeout_s
            for _ in range(int(p.health_timeout_s / max(self.poll_interval_s, 0.01)) + 2):
                if self.healthy(p.health_url):
                    log.info("production on %s is healthy again (%s)", self.host_name, p.health_url)
                    self.restored_at = datetime.now(UTC)
                    self.restored = True
                    self.disarm()
                    self.marker.unlink(missing_ok=True)
                    if self.restore_by is not None and self.restored_at > self.restore_by:
                        self._alert(
                            f"production on host {self.host_name} was down beyond its planned "
                            f"outage: back at {self.restored_at:%H:%M:%S} UTC, planned by "
                            f"{self.restore_by:%H:%M:%S} UTC (run {self.run_id})"
                        )
                    return True
                if time.monotonic() >= deadline:
                    break
                time.sleep(self.poll_interval_s)
            raise RuntimeError(f"{p.health_url} did not answer 200 within {p.health_timeout_s} s")
        except Exception as e:  # noqa: BLE001 - any failure to restore production is recorded and blocks the next run
            self.restored = False
            self.restore_error = (
                self.ssh.redact(f"{type(e).__name__}: {e}") if self.ssh else f"{type(e).__name__}: {e}"
            )
            fallback = (
                f"; the restore armed on the Box ({self.armed}) starts it by {self.restore_by:%H:%M:%S} UTC"
                if self.armed and self.restore_by
                else f"; the restore armed on the Box ({self.armed}) starts it"
                if self.armed
                else ""
            )
            self._alert(
                f"PRODUCTION NOT RESTORED on host {self.host_name} after run {self.run_id}: "
                f"{self.restore_error}{fallback}"
            )
            self._write_marker("not_restored", reason=self.restore_error)
            return False

    # -- a night carried from one Dagster run to the next (runner/night_hold.py)

    def hand_over(self, night: str, done: list[str], remaining: int) -> None:
        """Leave production down for ``night``'s later runs: the marker says so (a run of that night
        joins it; any other run restores it first), the Box's own restore stays armed for the window's
        end, so production comes back even when no later run ever starts."""
        self._write_marker(HELD_FOR_NIGHT, night=night, done=done, remaining=remaining, armed=self.armed)

    def adopt(self, info: dict[str, Any]) -> None:
        """Take over production as an earlier run of the night left it (stopped, its restore armed)."""
        self.stopped = True
        self.stopped_at = when(info.get("stopped_at"))
        self.restore_by = when(info.get("restore_by")) or self.restore_by
        self.suspended_policy = info.get("restart_policy")
        self.armed = info.get("armed") or "armed by an earlier run of the night"

    def __enter__(self) -> ProductionGuard:
        self.check_marker()
        try:
            self.stop()
        except BaseException:
            if not self.stopped:
                self.marker.unlink(missing_ok=True)  # refused before the stop: nothing to come back from
            self.restore()  # a half-done stop must not leave users without their engine
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
