"""A throwaway OpenSSH server on loopback in front of this machine's dockerd (Debian openssh-server).

``start_sshd(dir)`` makes a host key and a user key (ssh-keygen, ed25519), writes an sshd_config that accepts
only that key (AuthorizedKeysFile, no passwords, no PAM) for the Box's user (``box_user``: ``strix-box`` when
the tests run as root, else the test's user), a known_hosts file with the host key, and runs
``/usr/sbin/sshd -D -e`` on a free 127.0.0.1 port. The ``docker`` CLI of a session reaches the default
daemon (or ``$DOCKER_HOST``, passed on with SetEnv), so ``ssh … docker system dial-stdio`` is the Box path
on this machine.

Faults: :meth:`Sshd.drop_sessions` kills the per-connection processes (every ssh client of it sees
"closed by remote host" while the server keeps listening); :meth:`Sshd.stop` and
:meth:`Sshd.start` take the whole server away and bring it back on the same port;
:meth:`Sshd.freeze` / :meth:`Sshd.thaw` stop and continue it, so connections stay open and silent.

Callers check :func:`sshd_available` with ``conftest.need`` first.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.infra import free_port, stop_process
from support.procfs import descendants

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")  # sshd refuses to start without its privilege-separation directory


def sshd_available() -> bool:
    return os.access(SSHD, os.X_OK) and all(shutil.which(t) for t in ("ssh", "ssh-keygen"))


def keygen(path: Path, comment: str) -> Path:
    """An ed25519 key pair without a passphrase at ``path`` / ``path.pub``."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return path


@dataclass
class Sshd:
    dir: Path
    port: int
    user: str
    key: Path  # the user's private key the server accepts
    known_hosts: Path  # the server's host key, as a client's known_hosts file wants it
    config: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    authorized_dir: Path | None = None  # outside the test's private tmp_path, removed on close
    _log_files: list = field(default_factory=list)

    @property
    def bin_dir(self) -> Path:
        """First on every session's PATH, empty until a test puts a stand-in tool there (a Box's
        ``systemctl``: support/fake_systemd.py)."""
        assert self.authorized_dir is not None
        return self.authorized_dir / "bin"

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def start(self, timeout_s: float = 15) -> None:
        """Run sshd on its port (again, after :meth:`stop`); waits until it accepts connections."""
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        out = self.log_path.open("ab")
        self._log_files.append(out)
        self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=out, stderr=out)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited {self.process.returncode}:\n{self.log()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"sshd did not listen on 127.0.0.1:{self.port} in {timeout_s:g} s:\n{self.log()}")

    def session_pids(self) -> list[int]:
        return descendants(self.process.pid) if self.process and self.process.poll() is None else []

    def drop_sessions(self) -> int:
        """Kill every connection's server processes (and what they run); the server keeps listening.
        Returns how many processes were killed."""
        pids = self.session_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def freeze(self) -> None:
        """SIGSTOP the server and every session: connections stay open but nothing answers -- a
        network that silently drops packets. Only ssh's keepalives and connect timeout notice.

        The listener is stopped first, then the sessions pass by pass until a pass finds none new: a
        connection accepted while /proc was being read would otherwise keep answering (seen once in
        CI: the client's pooled connection through such a session served the whole suite)."""
        if self.process is None:
            return
        os.kill(self.process.pid, signal.SIGSTOP)
        stopped: set[int] = set()
        quiet = 0
        for _ in range(100):  # bounded: a stopped process forks no more, so this settles in a few passes
            new = [p for p in self.session_pids() if p not in stopped]
            for pid in new:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
                stopped.add(pid)
            quiet = 0 if new else quiet + 1
            if quiet == 2:
                return
            time.sleep(0.02)  # a fork under way when its parent was signalled completes before it stops
        raise RuntimeError(f"sshd {self.process.pid} kept forking while being frozen")

    def thaw(self) -> None:
        self._signal_all(signal.SIGCONT)

    def _signal_all(self, sig: signal.Signals) -> None:
        if self.process is None:
            return
        for pid in [self.process.pid, *self.session_pids()]:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """The connections and the listener gone: clients see drops, then "connection refused"."""
        if self.process is None:
            return
        self.thaw()  # a frozen server does not act on SIGTERM
        self.drop_sessions()
        stop_process(self.process)
        self.process = None

    def close(self) -> None:
        self.stop()
        for f in self._log_files:
            f.close()
        if self.authorized_dir is not None:
            shutil.rmtree(self.authorized_dir, ignore_errors=True)

    def __enter__(self) -> Sshd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


BOX_USER = "strix-box"  # as on a real Box: a user of its own with the docker CLI, not root's login


def box_user() -> str:
    """The user the sessions log in as. As root: ``strix-box`` (made once: shell /bin/sh, in the
    ``docker`` group so its docker CLI reaches the daemon), because root's own login shell here is
    bash with pyenv in ~/.bashrc, which sshd's bash sources; a session killed mid-``pyenv rehash``
    leaves pyenv's lock behind and every later login then waits on it. Not root: the test's user."""
    if os.geteuid() != 0:
        return getpass.getuser()
    import pwd

    try:
        pwd.getpwnam(BOX_USER)
    except KeyError:
        groups = ["-G", "docker"] if _group_exists("docker") else []
        subprocess.run(
            [
                "useradd",
                "--system",
                "--shell",
                "/bin/sh",
                "--home-dir",
                f"/var/lib/{BOX_USER}",
                "--create-home",
                *groups,
                BOX_USER,
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
    # no password, but not "locked" (useradd's "!"): sshd without PAM refuses a locked account's keys
    subprocess.run(["usermod", "-p", "*", BOX_USER], check=True, capture_output=True, timeout=30)
    return BOX_USER


def _group_exists(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def start_sshd(directory: Path) -> Sshd:
    """Keys, config and known_hosts in ``directory``; sshd running on a free loopback port."""
    directory.mkdir(parents=True, exist_ok=True)
    host_key = keygen(directory / "host_ed25519", "strix-test-host")
    user_key = keygen(directory / "user_ed25519", "strix-test-user")
    user = box_user()
    # sshd reads authorized_keys as the user logging in: pytest's directories are root's alone (0700)
    shared = Path(tempfile.mkdtemp(prefix="strix-sshd-"))
    shared.chmod(0o755)
    authorized = shared / "authorized_keys"
    authorized.write_text(user_key.with_suffix(".pub").read_text())
    authorized.chmod(0o644)
    (shared / "bin").mkdir(mode=0o755)
    port = free_port()
    host_pub = host_key.with_suffix(".pub").read_text().split()
    known = directory / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    lines = [
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {host_key}",
        f"PidFile {directory / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized}",
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        f"AllowUsers {user}",
        "UsePAM no",
        "StrictModes no",  # pytest's temporary directories are not the owner-only ones sshd insists on
        "PrintMotd no",
        "LogLevel VERBOSE",
        "MaxStartups 100",
    ]
    # the Box's own tools a test stands in (Sshd.bin_dir) come before the system's; one SetEnv line
    # (sshd takes the first only)
    setenv = [f"PATH={shared / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    if os.environ.get("DOCKER_HOST"):
        setenv.append(f"DOCKER_HOST={os.environ['DOCKER_HOST']}")
    lines.append("SetEnv " + " ".join(setenv))
    config = directory / "sshd_config"
    config.write_text("\n".join(lines) + "\n")
    sshd = Sshd(directory, port, user, user_key, known, config, directory / "sshd.log", authorized_dir=shared)
    sshd.start()
    return sshd
