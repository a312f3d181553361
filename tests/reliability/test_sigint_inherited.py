"""Ctrl-C stops `strix` even when its parent started it with SIGINT ignored.

A non-interactive shell starts background jobs (``strix bench … &`` in a script, ``bash .ci/run &``)
with SIGINT ignored, and the disposition survives exec. The entry point installs the default handling
it relies on (strix_pipeline/signals.py), so the interrupt still ends the benchmark at once, through
the command's own interrupt path (exit 130, "strix: interrupted"), instead of being dropped while
the benchmark runs on for minutes. The server is the synthetic one on loopback (slow tokens), the
parent the harshest there is: it ignores SIGINT for the child on purpose.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.paths import SUPPORT
from support.pipeline_helpers import wait_for
from support.sigint import ignoring_sigint

from strix_pipeline.signals import restore_default_sigint

SERVER = SUPPORT / "synthetic_server.py"
STOP_WITHIN_S = 20  # the benchmark asked for would take > 10 min (300 requests of slow tokens)


def _sig_ignored(pid: int, signum: int) -> bool:
    """From the kernel: is ``signum`` ignored by process ``pid``?"""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise AssertionError(f"no SigIgn line for {pid}")


def test_restore_changes_only_an_ignored_sigint() -> None:
    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert restore_default_sigint() is True
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        mine = lambda *_: None  # noqa: E731 - a handler somebody installed on purpose
        signal.signal(signal.SIGINT, mine)
        assert restore_default_sigint() is False
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)


def test_strix_bench_started_with_sigint_ignored_stops_on_ctrl_c(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", "0", "--ttft-ms", "50", "--itl-ms", "100", "--serve-forever"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    bench = None
    try:
        line = server.stdout.readline() if server.stdout else ""
        assert line.startswith("PORT "), line
        url = f"http://127.0.0.1:{int(line.split()[1])}"
        log = tmp_path / "bench.log"
        with log.open("w") as out:
            bench = subprocess.Popen(
                [str(Path(sys.executable).parent / "strix"), "bench", "--url", url, "--model", "m"]
                + ["--scenario", "concurrency_sweep", "--concurrency", "1", "--requests", "300"]
                + ["--warmup", "0", "--timeout", "600"],
                cwd=tmp_path,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=ignoring_sigint,
                env={**os.environ, "STRIX_CONFIG": ""},
            )
        pid = bench.pid
        wait_for(
            "strix bench to send its requests",
            lambda: bench.poll() is not None or _connected(pid),
            60,
            poll_s=0.2,
            context=lambda: log.read_text()[-2000:],
        )
        assert bench.poll() is None, log.read_text()[-3000:]
        # born with SIGINT ignored (preexec_fn), it handles it now: the entry point put Python's handler back
        assert not _sig_ignored(pid, signal.SIGINT)
        sent = time.monotonic()
        os.killpg(pid, signal.SIGINT)
        try:
            code = bench.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"strix bench ignored Ctrl-C for {STOP_WITHIN_S} s") from None
        took = time.monotonic() - sent
        text = log.read_text()
        print(f"stopped {took:.2f} s after SIGINT, exit {code}")
        assert code == 130, text[-3000:]
        assert "strix: interrupted" in text
    finally:
        for p in (bench, server):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def _connected(pid: int) -> bool:
    """Has ``pid`` an established TCP connection (its first request is in flight)?"""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:
        return False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            f = row.split()
            if f[3] == "01" and int(f[9]) in inodes:  # ESTABLISHED
                return True
    return False
