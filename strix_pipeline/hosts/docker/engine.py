"""An engine running as a container: its address, SMI readings through the container, its log tail and
the thread streaming its log to a file."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.engine_facts import ROCM_VERSION_FILE, read_firmware, rocm_version_from
from strix_pipeline.engines.base import EngineSpec
from strix_pipeline.hosts.docker.ssh import LostConnection, SshTransport, client_transport
from strix_pipeline.hosts.errors import describe_exit
from strix_pipeline.memory import DockerProbe, SmiSource

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 80


@dataclass
class DockerEngine:
    """What a benchmark needs from a started engine (same shape as the local launcher's)."""

    base_url: str
    model: str
    metrics_url: str
    log_path: Path
    command: list[str]  # the engine's argv inside the container
    engine_build: str | None
    container_id: str
    container_name: str
    image_ref: str
    image_id: str | None
    repo_digests: list[str]
    spec: EngineSpec
    pid: int | None  # the engine's pid on the Docker host (RSS readable there on a local daemon)
    labels: dict[str, str] = field(default_factory=dict)
    image_attrs: dict[str, Any] = field(default_factory=dict, repr=False)  # the image's inspect data
    _container: Any = field(default=None, repr=False)
    # ssh:// hosts: the client's ssh processes, and when the engine started (a drop after it counts)
    transport: SshTransport | None = field(default=None, repr=False)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def command_line(self) -> str:
        return self.spec.command_line()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return container_log_tail(self._container, self.log_path, lines)

    def exit_description(self) -> str | None:
        """None while the container runs and the Docker host stayed reachable; else how the engine
        ended (signal named, OOM flagged), or that the ssh connection to its host was lost -- a run
        that lost the Box mid-way is not a clean measurement, even if the engine survived it."""
        import docker.errors

        lost = self.transport.lost_since(self.started_at) if self.transport else []
        try:
            self._container.reload()
        except docker.errors.NotFound:
            return "the engine container is gone from the Docker host"
        except Exception as e:  # noqa: BLE001 - the daemon or the way to it is gone
            if self.transport is None:
                return f"the Docker host did not answer ({type(e).__name__}: {e})"
            lost = self.transport.lost_since(self.started_at)
            return self._lost(lost, "the Docker host is unreachable: the run lost")
        if lost:
            return self._lost(lost, "the engine kept running, but the run lost")
        state = self._container.attrs.get("State", {})
        if state.get("Status") not in ("exited", "dead"):
            return None
        return container_exit(state, self.spec.kind)

    def _lost(self, lost: list[LostConnection], lead: str) -> str:
        assert self.transport is not None
        first = lost[0].describe() if lost else "(no ssh process ended yet)"
        more = f", {len(lost) - 1} more after it" if len(lost) > 1 else ""
        return f"{lead} the ssh connection to the Docker host {self.transport.target.display} {first}{more}"

    def exec(self, argv: list[str]) -> tuple[int, str]:
        """Run ``argv`` in the engine container: (exit code, output)."""
        result = self._container.exec_run(argv)
        output = result.output if isinstance(result.output, bytes) else (result.output or b"")
        return int(result.exit_code if result.exit_code is not None else -1), output.decode(
            "utf-8", "replace"
        )

    def exec_split(self, argv: list[str]) -> tuple[int, str, str]:
        """Run ``argv`` in the engine container: (exit code, stdout, stderr), kept apart."""
        return exec_split(self._container, argv)

    def rocm_version(self) -> str | None:
        """The ROCm version of the engine's image: ``/opt/rocm/.info/version`` inside the running
        container, else the image's ``ROCM_VERSION`` environment, else a ROCm version label; None
        ("not available") when the image has none of them -- never the controller's."""
        text: str | None = None
        try:
            code, out = self.exec(["cat", ROCM_VERSION_FILE])
            text = out if code == 0 else None
        except Exception as e:  # noqa: BLE001 - no cat, container gone: try the image's metadata
            log.debug("reading %s in %s: %s", ROCM_VERSION_FILE, self.container_name, e)
        config = self.image_attrs.get("Config") or {}
        return rocm_version_from(text, config.get("Env") or [], config.get("Labels") or {})

    def firmware(self) -> str | None:
        """The GPU firmware versions the engine's image reports (amd-smi, else rocm-smi), as
        ``fw <name>=<version>,…``; None when no tool answers."""
        return read_firmware(self.exec)


def exec_split(container: Any, argv: list[str]) -> tuple[int, str, str]:
    """``exec_run`` with stdout and stderr apart (demux): a tool's warning on stderr never lands in the
    JSON read from its stdout."""
    result = container.exec_run(argv, demux=True)
    out, err = result.output if isinstance(result.output, tuple) else (result.output, None)
    code = int(result.exit_code if result.exit_code is not None else -1)
    return code, (out or b"").decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")


class SmiReader(SmiSource):
    """The SMI tools of the engine's own image: exec'd in the running engine, else (before it starts,
    after it stopped) run in a throwaway container of that image with the host's GPU devices. Notes of
    unreadable output are kept for the run (:class:`SmiSource`)."""

    def __init__(self, client: Any, host: DockerHostConfig, image_ref: str, *, probe: Any = None) -> None:
        super().__init__(self._run)
        self.client = client
        self.host = host
        self.image_ref = image_ref
        self.engine: DockerEngine | None = None
        # a probe container whose image has the tools (or the Box simulator's) answers first
        self.probe_exec = probe.exec if isinstance(probe, DockerProbe) else None

    def _run(self, argv: list[str]) -> tuple[int, str, str]:
        if self.probe_exec is not None:
            code, out, err = self.probe_exec(argv)
            if code not in (126, 127):  # the tool is there (exit 127: not in the probe's image)
                return code, out, err
        if self.engine is not None:
            return self.engine.exec_split(argv)
        return self._oneshot(argv)

    def _oneshot(self, argv: list[str]) -> tuple[int, str, str]:
        """``argv`` in a throwaway container of the engine's image with the host's GPU devices; the
        container is removed whatever happened (an image without the tool fails at start, and
        ``containers.run`` would leave it behind, created)."""
        devices = [f"{d}:{d}" for d in self.host.devices]
        c = self.client.containers.create(
            self.image_ref,
            argv,
            entrypoint=[],
            network_mode="host",
            devices=devices,
            labels={"strix.probe": "true"},
        )
        try:
            c.start()
            code = int(c.wait(timeout=120).get("StatusCode", -1))
            out = c.logs(stdout=True, stderr=False) or b""
            err = c.logs(stdout=False, stderr=True) or b""
            return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        finally:
            try:
                c.remove(force=True)
            except Exception as e:  # noqa: BLE001 - gone already: nothing left behind
                log.debug("oneshot %s: %s", argv[0], e)


def container_log_tail(container: Any, log_path: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of the engine's output: from the daemon while the container exists (complete
    even if the streaming thread lags), else from the log file."""
    if container is not None:
        try:
            raw = container.logs(tail=lines)
            return raw.decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - the container or the daemon gone: the log file follows
            pass
    if log_path is not None:
        try:
            return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            pass
    return ""


LOST_WAIT_S = 2.0  # how long an unexpected end of the log stream waits to learn whether ssh was lost


class LogStreamer(threading.Thread):
    """Copies the container's stdout+stderr into the log file until the container ends."""

    def __init__(self, container: Any, path: Path) -> None:
        super().__init__(name=f"log-{container.name}", daemon=True)
        self.container = container
        self.path = path
        self.started = datetime.now(UTC)
        # set by the engine before it stops the container: an end of the stream after that is expected
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            with self.path.open("ab") as f:
                for chunk in self.container.logs(stream=True, follow=True):
                    f.write(chunk)
                    f.flush()
        except Exception as e:  # noqa: BLE001 - the container or the way to it went away: the file has what we got
            log.debug("log stream of %s ended: %s", self.container.name, e)
        transport = client_transport(self.container.client)
        # an end nobody asked for may be a dropped ssh session whose process is still exiting
        wait_s = 0.0 if self.stopping.is_set() else LOST_WAIT_S
        lost = transport.lost_since(self.started, wait_s=wait_s) if transport else []
        if lost:  # the log ends here for a reason the reader of the file must see
            note = f"[strix {time.strftime('%H:%M:%S')}] log stream cut: ssh {lost[-1].describe()}\n"
            log.warning("log stream of %s cut: ssh %s", self.container.name, lost[-1].describe())
            try:
                with self.path.open("a") as f:
                    f.write(note)
            except OSError:
                pass


def container_exit(state: dict, engine: str) -> str:
    oom = " (the kernel OOM-killed it)" if state.get("OOMKilled") else ""
    return f"container {describe_exit(state.get('ExitCode'), engine, container=True)}{oom}"
