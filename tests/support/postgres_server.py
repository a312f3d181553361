"""A throwaway PostgreSQL cluster on loopback, made by the test that needs it (Debian ``postgresql``).

``start_postgres(tmp_path)`` runs ``initdb`` and ``postgres`` from the Debian packages (found under
``/usr/lib/postgresql/<version>/bin``) on a free 127.0.0.1 port with its data directory in the test's
own folder, trust authentication on loopback only, and returns a ``Postgres`` whose ``dsn`` any
client takes. PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres``
system user the Debian package creates. Tests call ``postgres_binaries()`` through conftest's
``need`` first, so a missing package fails in CI and skips locally.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from support.infra import free_port, stop_process


def postgres_binaries() -> Path | None:
    """The bin directory of the newest Debian PostgreSQL server, or None when it is not installed."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    for d in reversed(dirs):
        if os.access(os.path.join(d, "initdb"), os.X_OK) and os.access(os.path.join(d, "postgres"), os.X_OK):
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("postgres") else None


@dataclass
class Postgres:
    """A running cluster; ``stop()`` (or leaving the ``with`` block) shuts it down and waits."""

    host: str
    port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    user: str = "postgres"

    def dsn(self, database: str = "postgres") -> str:
        """libpq key/value form: what DuckDB's postgres extension and psycopg both accept."""
        return f"host={self.host} port={self.port} user={self.user} dbname={database}"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        out = subprocess.run(
            ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", self.dsn(database), "-c", sql],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"psql failed ({out.returncode}): {out.stderr.strip()}")
        return out.stdout.strip()

    def create_database(self, name: str) -> str:
        self.psql(f'CREATE DATABASE "{name}"')
        return name

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.process, grace_s=30)  # SIGTERM: "smart" shutdown; connections are test-owned
        if self.data_dir.parent.name.startswith("strix-pg-"):
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)

    def __enter__(self) -> Postgres:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _as_owner(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def start_postgres(base: Path, *, timeout_s: float = 60.0) -> Postgres:
    """initdb a new cluster (under ``base``, or in /tmp when running as root) and start it on a free loopback
    port; raise with its log."""
    bindir = postgres_binaries()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (apt-get install postgresql)")
    # Not under pytest's tmp_path: that is private to root (0700), and the cluster's owner must reach it.
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="strix-pg-", dir=base if os.geteuid() != 0 else None))
    data, sock, log_path = root / "data", root / "sock", root / "postgres.log"
    sock.mkdir()
    if os.geteuid() == 0:
        import pwd

        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        os.chown(sock, pw.pw_uid, pw.pw_gid)
    init = subprocess.run(
        _as_owner(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            ]
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr.strip()[-2000:]}")
    port = free_port()
    log_file = open(log_path, "wb")  # handed to the child, closed with it
    if os.geteuid() == 0:
        os.chown(log_path, pw.pw_uid, pw.pw_gid)
    proc = subprocess.Popen(
        _as_owner(
            [
                str(bindir / "postgres"),
                "-D",
                str(data),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-k",
                str(sock),
                "-c",
                "fsync=off",
                "-c",
                "max_connections=100",
            ]
        ),
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    log_file.close()
    pg = Postgres("127.0.0.1", port, data, log_path, proc)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited with {proc.returncode}: {pg.log()[-2000:]}")
        ready = subprocess.run(
            ["pg_isready", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres"],
            capture_output=True,
            timeout=10,
        )
        if ready.returncode == 0:
            return pg
        time.sleep(0.2)
    pg.stop()
    raise RuntimeError(f"postgres not ready within {timeout_s:g}s: {pg.log()[-2000:]}")
