"""`make ui` -- the project's UI command -- listens on loopback only.

The real command starts (the Makefile's `ui` target: `dagster dev` with the webserver and the
daemon) on a free port, with a throwaway DAGSTER_HOME and a test config. From the kernel's socket
tables it is read what every process of that command listens on: the webserver's port on 127.0.0.1
and nothing of the command's on 0.0.0.0 or ::. Then it is stopped as a person stops it (Ctrl-C to the
process group), within a bounded wait -- started with SIGINT ignored, as a script's `&` starts it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import need
from support.infra import free_port
from support.paths import REPO
from support.pipeline_helpers import write_config
from support.procfs import process_tree
from support.sigint import ignoring_sigint

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 240  # dagster dev loads the definitions in a code server; two busy cores are slow
STOP_TIMEOUT_S = 60


def _ipv4(hex_addr: str) -> str:
    return socket.inet_ntop(socket.AF_INET, bytes.fromhex(hex_addr)[::-1])


def _ipv6(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    # /proc stores the address as four host-order (little-endian) 32-bit words
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def listening_sockets() -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of every listening TCP socket on this machine (IPv4 and IPv6)."""
    out: dict[int, tuple[str, int]] = {}
    for table, decode in (("/proc/net/tcp", _ipv4), ("/proc/net/tcp6", _ipv6)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            addr, port = fields[1].split(":")
            out[int(fields[9])] = (decode(addr), int(port, 16))
    return out


def socket_inodes(pids: set[int]) -> set[int]:
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def test_make_ui_listens_on_loopback_only(tmp_path: Path) -> None:
    need(shutil.which("make") is not None, "make", "apt-get install make")
    port = free_port()
    env = {
        **os.environ,
        "STRIX_CONFIG": str(write_config(tmp_path)),  # warehouse and artifacts under tmp_path
        "DAGSTER_HOME": str(tmp_path / "dagster-home"),
    }
    log = (tmp_path / "make-ui.log").open("w")
    proc = subprocess.Popen(
        ["make", "-C", str(REPO), "ui", f"UI_PORT={port}", f"DAGSTER_HOME={tmp_path / 'dagster-home'}"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: Ctrl-C goes to all of it, and only to it
        # started as from a script's `&` (SIGINT ignored): `make ui` must still stop on Ctrl-C
        preexec_fn=ignoring_sigint,
    )
    try:
        mine: dict[int, tuple[str, int]] = {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "make-ui.log").read_text()[-3000:]
            listening = listening_sockets()
            mine = {i: listening[i] for i in socket_inodes(process_tree(proc.pid)) if i in listening}
            if any(p == port for _, p in mine.values()):
                break
            time.sleep(1)
        else:
            pytest.fail(f"`make ui` did not listen on {port} in {START_TIMEOUT_S} s")
        print(f"`make ui` processes listen on: {sorted(mine.values())}")
        assert [a for a, p in mine.values() if p == port] == ["127.0.0.1"]
        # nothing the command started (webserver, daemon, code server) listens beyond loopback
        exposed = [(a, p) for a, p in mine.values() if a not in ("127.0.0.1", "::1")]
        assert exposed == [], exposed
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
    finally:
        stop_started = time.monotonic()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            pytest.fail(f"`make ui` did not stop within {STOP_TIMEOUT_S} s of Ctrl-C")
        log.close()
        print(f"stopped in {time.monotonic() - stop_started:.1f} s")
    assert not any(p == port for _, p in listening_sockets().values())
