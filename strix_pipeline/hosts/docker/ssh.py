"""Everything that talks ssh to a Docker host (the Box): one argv builder, and docker-py over it.

:func:`ssh_target` reads a host's ``docker_host = "ssh://{user}@box[:port]"`` and its key and host-key
settings; :meth:`SshTarget.argv` is the one ssh command line (batch mode, strict host keys, bounded
timeouts) that production.py, the Docker API and the doctor use alike. :class:`SshDockerClient`
carries the Docker API over ``ssh … docker system dial-stdio``, and a lost connection is kept as a
:class:`LostConnection`. The user and the key path are secrets: messages name their variables, never
their values. The options and why: docs/ssh.md.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any
from urllib.parse import urlparse

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.hosts.errors import EngineStartError

ALIVE_COUNT_MAX = 3  # unanswered keepalives before ssh gives up (see DockerHostConfig.ssh_alive_interval_s)
_SSH_FAILED = 255  # ssh's exit status for its own errors, as opposed to the remote command's
_DIAL = "docker system dial-stdio"
_STDERR_TAIL = 600


@dataclass(frozen=True)
class SshTarget:
    """One ssh:// Docker host, resolved from its config and the environment."""

    url: str  # docker_host as configured ("ssh://{user}@box"): shown in messages, holds no secret
    hostname: str
    port: int | None
    user: str | None
    user_env: str | None  # set when the user came from the environment: a secret, redacted
    key_path: str | None
    key_env: str | None  # the variable the config names for the key (set or not)
    known_hosts: str | None
    connect_timeout_s: int
    alive_interval_s: int

    @property
    def display(self) -> str:
        """The host as messages name it: ``ssh://<$STRIX_SSH_USER>@box:22`` -- no secret in it."""
        user = f"<${self.user_env}>" if self.user_env else self.user
        where = f"{self.hostname}:{self.port}" if self.port else self.hostname
        return f"ssh://{user}@{where}" if user else f"ssh://{where}"

    @property
    def key_hint(self) -> str:
        if self.key_path:
            return f"the key in ${self.key_env}"
        if self.key_env:
            return f"ssh's own keys (${self.key_env} is not set)"
        return "ssh's own keys (no ssh_key_path_env in the config)"

    def options(self) -> list[str]:
        """The ssh options every connection to this host uses (no destination, no command)."""
        opts = [
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={self.connect_timeout_s}",
            "-o",
            f"ServerAliveInterval={self.alive_interval_s}",
            "-o",
            f"ServerAliveCountMax={ALIVE_COUNT_MAX}",
            "-o",
            "StrictHostKeyChecking=yes",
        ]
        if self.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.key_path:
            opts += ["-i", self.key_path, "-o", "IdentitiesOnly=yes"]
        if self.port:
            opts += ["-p", str(self.port)]
        if self.user:
            opts += ["-l", self.user]
        return opts

    def argv(self, remote_command: str) -> list[str]:
        """``ssh <options> -- host <remote_command>`` (the remote shell splits the command)."""
        return ["ssh", *self.options(), "--", self.hostname, remote_command]

    def redact(self, text: str) -> str:
        """``text`` (ssh's stderr, an exception) with the key path and an environment user replaced
        by their variables' names."""
        if self.key_path:
            text = text.replace(self.key_path, f"${self.key_env}")
        if self.user_env and self.user:
            text = text.replace(f"{self.user}@", f"<${self.user_env}>@")
        return text


def is_ssh(host: DockerHostConfig) -> bool:
    return (host.docker_host or "").startswith("ssh://")


class SshUserUnset(EngineStartError):
    """``docker_host`` takes ``{user}`` from a variable that is not set (its fix: export it)."""


def ssh_target(host: DockerHostConfig) -> SshTarget | None:
    """The host's :class:`SshTarget`, or None when its Docker is not reached over ssh.

    Refuses (``failed_guard``) a user variable that is not set, a URL without a host, and a key
    variable naming no file -- before any connection is tried.
    """
    if not is_ssh(host):
        return None
    url = host.docker_host or ""
    user_env = None
    filled = url
    if "{user}" in url:
        user_env = host.ssh_user_env or ""
        user = os.environ.get(user_env, "") if user_env else ""
        if not user:
            raise SshUserUnset("failed_guard", f"docker_host {url} needs the user in ${user_env}")
        filled = url.replace("{user}", user)
    u = urlparse(filled)
    try:
        port = u.port
    except ValueError as e:
        raise EngineStartError("failed_guard", f"docker_host {url}: bad port ({e})") from None
    if not u.hostname:
        raise EngineStartError("failed_guard", f"docker_host {url} names no host")
    key_path = None
    if host.ssh_key_path_env and os.environ.get(host.ssh_key_path_env):
        key_path = os.path.expanduser(os.environ[host.ssh_key_path_env])
        if not os.path.isfile(key_path) or not os.access(key_path, os.R_OK):
            raise EngineStartError(
                "failed_guard",
                f"${host.ssh_key_path_env} (the ssh key for {url}) names no readable file",
            )
    known = os.path.expanduser(host.ssh_known_hosts) if host.ssh_known_hosts else None
    if known and not os.path.isfile(known):
        raise EngineStartError("failed_guard", f"ssh_known_hosts {known} of {url} does not exist")
    return SshTarget(
        url=url,
        hostname=u.hostname,
        port=port,
        user=u.username,
        user_env=user_env,
        key_path=key_path,
        key_env=host.ssh_key_path_env,
        known_hosts=known,
        connect_timeout_s=host.ssh_connect_timeout_s,
        alive_interval_s=host.ssh_alive_interval_s,
    )


# ---------------------------------------------------------------- the ssh processes


@dataclass(frozen=True)
class LostConnection:
    """An ssh process that ended by ssh's own failure: refused, not authenticated, dropped."""

    at: datetime  # when it was seen ended (within a Docker call of the actual loss)
    stderr: str  # ssh's last words, redacted

    def describe(self) -> str:
        return f"at {self.at:%H:%M:%S} UTC ({self.stderr or 'ssh exited 255 without a message'})"


@dataclass
class _Master:
    """The one authenticated ssh connection the dials ride (OpenSSH connection sharing). Its remote
    command reads the pipe we hold: when this process ends, however it ends, the pipe closes, the
    command ends and the master goes once its last dial has closed -- nothing outlives the controller."""

    proc: subprocess.Popen[bytes]
    stderr: IO[bytes]
    hold: int  # the write end of the master's stdin
    control_dir: str
    path: str  # the control socket, in a directory only this user can enter
    started: float  # time.monotonic()


@dataclass
class _Dial:
    proc: subprocess.Popen[bytes]
    stderr: IO[bytes]
    sock: socket.socket
    master: _Master | None = None  # the shared connection it rode, if any


# Unix socket paths are at most 108 bytes; ssh appends a random suffix while it binds
_CONTROL_PATH_MAX = 80
_MASTER_RETRY_S = 5.0  # a master lost sooner than this after its start is not started again at once


@dataclass
class SshTransport:
    """The ssh processes carrying one client's Docker connections, and the ones that were lost.

    A Docker exec or log stream hijacks its HTTP connection, so each takes a new dial: a full ssh
    handshake each (~0.25 s on loopback, more on a busy Box) made a Box run's probe reads and engine
    queries cost seconds. The dials share one master connection instead (``ControlMaster``), ~0.03 s
    each; while there is no master (starting, lost) a dial connects on its own, as before.
    """

    target: SshTarget
    lost: list[LostConnection] = field(default_factory=list)
    _dials: list[_Dial] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _master: _Master | None = None

    def open(self, timeout: float | None) -> socket.socket:
        """A socket whose other end is ``ssh … docker system dial-stdio``: the daemon's API."""
        self.reap()
        master = self._shared_connection()
        ours, theirs = socket.socketpair()
        err = tempfile.TemporaryFile()
        argv = self.target.argv(_DIAL)
        if master is not None:  # a missing socket (the master still authenticating): ssh dials alone
            argv[1:1] = ["-o", "ControlMaster=no", "-o", f"ControlPath={master.path}"]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=theirs,
                stdout=theirs,
                stderr=err,
                # a Ctrl-C of the pipeline must not cut the connection its cleanup still needs
                start_new_session=True,
            )
        except OSError as e:
            ours.close()
            err.close()
            raise EngineStartError("failed_guard", f"cannot run ssh for {self.target.display}: {e}") from e
        finally:
            theirs.close()
        ours.settimeout(timeout)
        with self._lock:
            self._dials.append(_Dial(proc, err, ours, master))
        return ours

    def _shared_connection(self) -> _Master | None:
        """The live master, one started when there is none (none at all where sharing cannot work)."""
        with self._lock:
            m = self._master
            if m is not None and m.proc.poll() is None:
                return m
            if m is not None and time.monotonic() - m.started < _MASTER_RETRY_S:
                return None  # lost a moment ago: the Box is likely unreachable, dial alone
            if m is not None:
                self._end_master(m, wait_s=0)
            self._master = self._start_master()
            return self._master

    def _start_master(self) -> _Master | None:
        control_dir = tempfile.mkdtemp(prefix="strix-ssh-")
        path = os.path.join(control_dir, "m")
        if len(path) > _CONTROL_PATH_MAX:
            os.rmdir(control_dir)
            return None
        read_end, hold = os.pipe()
        err = tempfile.TemporaryFile()
        argv = self.target.argv("cat >/dev/null")
        argv[1:1] = ["-o", "ControlMaster=yes", "-o", f"ControlPath={path}"]
        try:
            proc = subprocess.Popen(
                argv, stdin=read_end, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
            )
        except OSError:
            os.close(hold)
            err.close()
            shutil.rmtree(control_dir, ignore_errors=True)
            return None
        finally:
            os.close(read_end)
        return _Master(proc, err, hold, control_dir, path, time.monotonic())

    @staticmethod
    def _end_master(m: _Master, wait_s: float) -> None:
        """Close the master's pipe (its remote command ends, and the master once its dials have);
        a master still there after ``wait_s`` (a frozen Box answers nothing) is terminated."""
        try:
            os.close(m.hold)
        except OSError:
            pass  # closed already
        try:
            m.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            m.proc.terminate()
            _gone(m.proc)
        m.stderr.close()
        shutil.rmtree(m.control_dir, ignore_errors=True)

    def reap(self) -> None:
        """Collect the ended ssh processes; keep those that ended by ssh's own failure."""
        with self._lock:
            ended = [d for d in self._dials if d.proc.poll() is not None]
            self._dials = [d for d in self._dials if d not in ended]
        for d in ended:
            if d.proc.returncode == _SSH_FAILED:
                self.lost.append(LostConnection(datetime.now(UTC), self._said(d)))
            d.stderr.close()

    def lost_since(self, since: datetime | None = None, wait_s: float = 0.0) -> list[LostConnection]:
        """The connections lost since ``since``; with ``wait_s``, waits (bounded) for one to show: a
        socket sees its EOF a moment before its ssh process can be reaped."""
        deadline = time.monotonic() + wait_s
        while True:
            self.reap()
            found = [x for x in self.lost if since is None or x.at >= since]
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(0.05)

    def last_error(self, wait_s: float = 2.0) -> str | None:
        """ssh's words when a connection just failed: waits (bounded) for the failing process to end."""
        deadline = time.monotonic() + wait_s
        for _ in range(int(wait_s / 0.05) + 1):
            self.reap()
            if self.lost or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        return self.lost[-1].stderr if self.lost else None

    def close(self) -> None:
        """End every ssh process this client started (bounded), closing their sockets first, the
        master last."""
        with self._lock:
            dials, self._dials = self._dials, []
            master, self._master = self._master, None
        for d in dials:
            d.sock.close()  # EOF: dial-stdio ends and ssh with it
        deadline = time.monotonic() + 2  # for all of them together: a frozen Box answers no EOF
        for d in dials:
            try:
                d.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                d.proc.terminate()
        for d in dials:
            _gone(d.proc)
            d.stderr.close()
        if master is not None:
            self._end_master(master, wait_s=max(0.0, deadline - time.monotonic()))

    def _said(self, d: _Dial) -> str:
        """ssh's words for a lost dial: a dial riding the master ends without any when the master's
        connection drops (the master has them: "closed by remote host", "not responding")."""
        text = _tail(d.stderr)
        if d.master is not None:
            try:
                d.master.proc.wait(timeout=1)  # it ends a moment after its dials
            except subprocess.TimeoutExpired:
                pass
            if d.master.proc.returncode == _SSH_FAILED:
                text = _tail(d.master.stderr) or text
        return self.target.redact("; ".join(line.strip() for line in text.splitlines() if line.strip()))


def _gone(proc: subprocess.Popen[bytes]) -> None:
    """Wait for a terminated ssh to end; one that ignores SIGTERM is killed."""
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _tail(f: IO[bytes]) -> str:
    try:
        f.seek(0)
        return f.read()[-_STDERR_TAIL:].decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


# ---------------------------------------------------------------- docker-py over the ssh processes


def _adapter_class() -> type:
    """The requests adapter (with its urllib3 pool and connection), built on first use: docker-py
    and urllib3 are imported only by Docker hosts."""
    import urllib3.connection
    import urllib3.connectionpool
    from docker.transport.basehttpadapter import BaseHTTPAdapter

    class DialConnection(urllib3.connection.HTTPConnection):
        def __init__(self, transport: SshTransport, timeout: float) -> None:
            super().__init__("localhost", timeout=timeout)
            self.transport = transport
            self.dial_timeout = timeout

        def connect(self) -> None:
            self.sock = self.transport.open(self.dial_timeout)

    class DialPool(urllib3.connectionpool.HTTPConnectionPool):
        def __init__(self, transport: SshTransport, timeout: float, maxsize: int) -> None:
            super().__init__("localhost", timeout=timeout, maxsize=maxsize)
            self.transport = transport
            self.dial_timeout = timeout

        def _new_conn(self) -> DialConnection:
            return DialConnection(self.transport, self.dial_timeout)

    class DialAdapter(BaseHTTPAdapter):
        # one pool for every URL (docker-py's adapters keep one per URL: here each would be its own
        # ssh handshake); connections are reused while their ssh process lives
        def __init__(self, transport: SshTransport, timeout: float, max_pool_size: int = 10) -> None:
            self.transport = transport
            self.timeout = timeout
            self.max_pool_size = max_pool_size
            self.pool: DialPool | None = None
            self._pool_lock = threading.Lock()
            super().__init__()

        def get_connection(self, url: str, proxies: Any = None) -> DialPool:
            with self._pool_lock:
                if self.pool is None:
                    self.pool = DialPool(self.transport, self.timeout, self.max_pool_size)
                return self.pool

        def request_url(self, request: Any, proxies: Any) -> str:
            return request.path_url  # no proxies on a pipe, as docker-py's unix adapter

        def close(self) -> None:
            super().close()
            with self._pool_lock:
                pool, self.pool = self.pool, None
            if pool is not None:
                pool.close()

    return DialAdapter


def docker_client(target: SshTarget, *, timeout_s: int = 300) -> Any:
    """A docker-py ``DockerClient`` whose every connection is ``ssh … docker system dial-stdio``.

    Asks the daemon its API version at once, so a refused key, an unknown host key or an
    unreachable host fails here (``failed_guard``, with ssh's own words) and not mid-run.
    """
    import docker
    from docker.constants import MINIMUM_DOCKER_API_VERSION

    adapter_cls = _adapter_class()
    transport = SshTransport(target)

    class _Api(docker.APIClient):
        def __init__(self) -> None:
            # a unix URL that is never dialled: it makes docker-py treat the base URL as a local
            # socket ('http+docker://localhost'), whose adapter is replaced by the ssh one below
            super().__init__(
                base_url="unix:///strix-ssh-dial", version=MINIMUM_DOCKER_API_VERSION, timeout=timeout_s
            )
            self._custom_adapter = adapter_cls(transport, timeout_s)
            self.mount("http+docker://", self._custom_adapter)

    class _Client(docker.DockerClient):
        def __init__(self) -> None:  # docker.DockerClient's own __init__ only builds self.api
            self.api = _Api()
            self.transport = transport

        def close(self) -> None:
            try:
                super().close()
            finally:
                transport.close()

    client = _Client()
    try:
        client.api._version = client.api._retrieve_server_version()
    except Exception as e:  # noqa: BLE001 - docker-py wraps ssh's failure in a bare disconnect
        said = transport.last_error()
        client.close()
        raise EngineStartError("failed_guard", unreachable_message(target, said, e)) from None
    return client


def unreachable_message(target: SshTarget, ssh_said: str | None, error: BaseException | None = None) -> str:
    """Why Docker on ``target`` could not be reached: ssh's words, the key used and how to check."""
    why = ssh_said or (target.redact(f"{type(error).__name__}: {error}") if error else "no answer")
    return (
        f"cannot reach Docker on {target.display} over ssh: {why[:_STDERR_TAIL]} -- "
        f"using {target.key_hint}; check `ssh {target.hostname} docker info` works as this user "
        "without a prompt and that the host key is in the known_hosts file"
    )


def client_transport(client: Any) -> SshTransport | None:
    """The ssh transport of a client :func:`docker_client` made, else None (a local socket)."""
    transport = getattr(client, "transport", None)
    return transport if isinstance(transport, SshTransport) else None
