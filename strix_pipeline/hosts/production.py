"""The Box serves its users between runs: stop production before a benchmark, always bring it back.

``with ProductionGuard(...)`` stops the host's production engine (a container, or stop/start
commands such as a systemd unit) and, on every exit path -- success, failure, cancellation --
starts it again and waits for its health URL. When it cannot be restored the guard says so loudly
(error log, ``restored is False``) and writes a marker file; while the marker exists and production
is not healthy, the next run refuses to start. Runs start only inside the maintenance window
unless forced.
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from strix_pipeline.config import HostConfig, ProductionEngine
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.ssh import SshTarget
from strix_pipeline.paths import inside
from strix_pipeline.planning.window import window_at

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- maintenance window


def check_maintenance_window(
    host: HostConfig,
    default_schedule: str,
    *,
    now: datetime | None = None,
    timezone: str = "UTC",
    force: bool = False,
) -> datetime | None:
    """Refuse (``failed_guard``) outside the host's window; returns the window's start when inside.

    The window starts at each fire time of ``host.maintenance_window`` (default: the schedule), read
    as Dagster reads the schedule's cron (:mod:`strix_pipeline.maintenance_window`), and lasts
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
    timeouts, hosts/ssh.py) for an ``ssh://`` host, else here as is."""
    return ssh.argv(shlex.join(argv)) if ssh is not None else argv


def marker_path(state_dir: str | Path, host_name: str) -> Path:
    return inside(Path(state_dir), f"production-not-restored-{host_name}.json")


def http_healthy(url: str, timeout_s: float = 5.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


class ProductionGuard:
    """Context manager around a benchmark run on a host that serves users.

    ``ssh`` is the host's :class:`SshTarget` (``hosts.ssh.ssh_target``) when it is reached over ssh:
    stop and start commands run there. ``state_dir`` holds the not-restored marker.
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
        self.stopped = False
        self.restored: bool | None = None  # None: nothing to restore
        # when the Box's users lost their engine and when it answered its health URL again
        self.stopped_at: datetime | None = None
        self.restored_at: datetime | None = None
        self.restore_error: str | None = None

    # -- checks

    def check_marker(self) -> None:
        """Refuse to start while a previous run left production down; clear a stale marker."""
        if not self.marker.exists():
            return
        try:
            info = json.loads(self.marker.read_text())
        except (OSError, ValueError):
            info = {}
        if self.production is not None and self.healthy(self.production.health_url):
            log.warning("production on %s is healthy again; clearing %s", self.host_name, self.marker)
            self.marker.unlink(missing_ok=True)
            return
        raise EngineStartError(
            "failed_guard",
            f"production on host {self.host_name} was not restored after run {info.get('run_id', '?')} "
            f"at {info.get('at', '?')} ({info.get('reason', 'unknown reason')}); it is still not healthy "
            f"at {self.production.health_url if self.production else '?'}. Restore it, then run again "
            f"(marker {self.marker}).",
        )

    # -- stop / start

    def _run(self, argv: list[str], what: str) -> None:
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
            raise RuntimeError(
                f"{what} command {shlex.join(argv)}{where} exited {result.returncode}: {stderr[-500:]}"
            )

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
            log.info("stopping production container %s on %s", p.container, self.host_name)
            self.stopped_at = datetime.now(UTC)  # users lose it as the stop begins
            c.stop(timeout=self.stop_timeout_s)
            self.stopped = True
        else:
            log.info("stopping production on %s: %s", self.host_name, p.stop_command)
            self.stopped_at = datetime.now(UTC)
            self.stopped = True  # a half-run stop command still needs the start after it
            self._run(list(p.stop_command or []), "stop")

    def restore(self) -> bool:
        """Start production again and wait for its health URL; on failure log loudly and mark."""
        p = self.production
        if p is None or not self.stopped:
            return True
        try:
            if p.container:
                self.client.containers.get(p.container).start()
            else:
                self._run(list(p.start_command or []), "start")
            deadline = time.monotonic() + p.health_timeout_s
            for _ in range(int(p.health_timeout_s / max(self.poll_interval_s, 0.01)) + 2):
                if self.healthy(p.health_url):
                    log.info("production on %s is healthy again (%s)", self.host_name, p.health_url)
                    self.restored_at = datetime.now(UTC)
                    self.restored = True
                    self.marker.unlink(missing_ok=True)
                    return True
                if time.monotonic() >= deadline:
                    break
                time.sleep(self.poll_interval_s)
            raise RuntimeError(f"{p.health_url} did not answer 200 within {p.health_timeout_s} s")
        except Exception as e:  # noqa: BLE001 - any failure to restore production is recorded and blocks the next run
            self.restored = False
            self.restore_error = f"{type(e).__name__}: {e}"
            log.error(
                "PRODUCTION NOT RESTORED on host %s after run %s: %s -- the next run will refuse to start",
                self.host_name,
                self.run_id,
                self.restore_error,
            )
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            self.marker.write_text(
                json.dumps(
                    {
                        "host": self.host_name,
                        "run_id": self.run_id,
                        "at": datetime.now(UTC).isoformat(),
                        "reason": self.restore_error,
                    }
                )
            )
            return False

    def __enter__(self) -> ProductionGuard:
        self.check_marker()
        try:
            self.stop()
        except BaseException:
            self.restore()  # a half-done stop must not leave users without their engine
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
