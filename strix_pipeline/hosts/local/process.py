"""An engine on the embedded host `local`: a child process of this one, never outliving it.

What every local launcher shares (llama-server in :mod:`~strix_pipeline.hosts.local.llama_server`, vLLM in
:mod:`~strix_pipeline.hosts.local.vllm_server`): a free loopback port no other launcher of this process got,
a log file for the engine's output, a session (process group) of its own so signals reach everything
it spawns, a wait until it serves, and a stop on every exit path of the ``with`` block -- and, as a
last resort, at interpreter exit. Each launcher adds only its own: the command, what "ready" means
beyond HTTP 200 and what it asks the engine once it serves, and how its processes are killed.
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, ClassVar, Self

import httpx

from strix_pipeline.hosts.errors import EngineStartError, describe_exit
from strix_pipeline.provision.cache import cache_dir

_live: set[LocalProcess] = set()
_live_lock = threading.Lock()
_ports_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now that this process has not handed out before (two launchers never collide)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _ports_handed_out:
            _ports_handed_out.add(port)
            return port
    raise RuntimeError("no free port found in 50 tries")


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the process group of ``proc`` (a session leader), SIGKILL after ``grace_s``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


@dataclass(eq=False)
class LocalProcess:
    """A local engine process; subclasses build ``command`` and call :meth:`_claim_port` and
    :meth:`_spawn` from ``start()``, and implement ``_wait_ready()`` (with :meth:`_wait_serving`).

    On exit (normal or exception) the engine is stopped: :meth:`_kill` (by default SIGTERM to the
    process group, SIGKILL after ``grace_s``), then the log is closed.
    """

    NAME: ClassVar[str]  # the engine in messages: "llama-server", "vLLM"
    ENGINE: ClassVar[str]  # the engine whose crash hints describe_exit gives
    LOG_NAME: ClassVar[str]  # log files are <LOG_NAME>-<port>-<unix time>.log
    REAP_GRACE_S: ClassVar[float] = 5.0  # grace_s at interpreter exit, at the most

    log_dir: Path | None = None
    ready_timeout_s: float = 180.0
    grace_s: float = 10.0
    host: str = "127.0.0.1"

    # Filled in by start()
    port: int = 0
    pid: int | None = None
    command: list[str] = field(default_factory=list)
    log_path: Path | None = None
    engine_build: str | None = None
    _proc: subprocess.Popen | None = None
    _log_file: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def _wait_ready(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ start

    def _claim_port(self) -> str:
        """Take a free port and name the log after it; returns the ``<port>-<unix time>`` stamp."""
        self.port = free_port(self.host)
        log_dir = self.log_dir or cache_dir() / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        stamp = f"{self.port}-{int(time.time())}"
        self.log_path = log_dir / f"{self.LOG_NAME}-{stamp}.log"
        return stamp

    def _spawn(
        self, *, env: dict[str, str] | None = None, cwd: Path | None = None, announce: bool = False
    ) -> None:
        """Start ``command`` with its output in the log, in a session of its own, and wait until it
        is ready; any failure on the way stops it. ``announce`` writes the command line first."""
        assert self.log_path is not None
        self._log_file = self.log_path.open("wb")
        if announce:
            self._log_file.write(f"[strix] $ {self.command_line}\n".encode())
            self._log_file.flush()
        self._proc = subprocess.Popen(
            self.command,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=None if cwd is None else str(cwd),
            start_new_session=True,  # own process group: killpg reaches every child
        )
        self.pid = self._proc.pid
        with _live_lock:
            _live.add(self)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _accepts(self, path: str, response: httpx.Response) -> bool:
        """Whether a 200 from ``path`` means what it should (subclasses look into the body)."""
        return True

    def _wait_serving(self, client: httpx.Client, paths: Sequence[str], poll_s: float) -> None:
        """Until each of ``paths`` answers 200 in turn: the process ending first is ``failed_start``,
        ``ready_timeout_s`` running out ``failed_serve`` (with what the engine answered last)."""
        assert self._proc is not None and self.log_path is not None
        started = time.monotonic()
        deadline = started + self.ready_timeout_s
        todo = list(paths)
        last = "not listening yet"
        progress = getattr(self, "progress", None)  # a launcher that reports long starts (vLLM)
        told = started
        while todo:
            if callable(progress) and time.monotonic() - told >= 30:
                told = time.monotonic()
                progress(f"{self.NAME}: loading, {told - started:.0f} s so far ({last}); log {self.log_path}")
            code = self._proc.poll()
            if code is not None:
                raise EngineStartError(
                    "failed_start", f"{self._ended(code)} before it was ready", log_tail(self.log_path)
                )
            try:
                r = client.get(f"{self.base_url}{todo[0]}")
                if r.status_code == 200 and self._accepts(todo[0], r):
                    todo.pop(0)
                    continue
                last = f"{todo[0]} answered HTTP {r.status_code}"  # 503 while loading
            except httpx.HTTPError as e:
                last = f"{todo[0]}: {type(e).__name__}"
            if time.monotonic() > deadline:
                raise EngineStartError(  # never ready: it did not start (C1), as on a Docker host
                    "failed_start",
                    f"{self.NAME} not ready within {self.ready_timeout_s:.0f} s ({last})",
                    log_tail(self.log_path),
                )
            time.sleep(poll_s)

    # ------------------------------------------------------------------ state and stop

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _ended(self, code: int) -> str:
        return f"{self.NAME} {describe_exit(code, self.ENGINE)}"

    def exit_description(self) -> str | None:
        """None while the engine runs; else how it ended (``was killed by SIGILL: …``)."""
        code = None if self._proc is None else self._proc.poll()
        return None if code is None else self._ended(code)

    def _kill(self, proc: subprocess.Popen) -> None:
        kill_group(proc, self.grace_s)

    def stop(self) -> None:
        proc = self._proc
        if proc is not None:
            try:
                self._kill(proc)
            finally:
                with _live_lock:
                    _live.discard(self)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


@atexit.register
def _reap_all() -> None:
    with _live_lock:
        servers = list(_live)
    for srv in servers:
        srv.grace_s = min(srv.grace_s, srv.REAP_GRACE_S)
        try:
            srv.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass
