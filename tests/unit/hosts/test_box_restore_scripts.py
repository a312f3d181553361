"""The Box's own restore (hosts/box/restore_guard.py), run for real by a local sh: armed it fires after
its delay and records its attempts; disarmed it never fires; the systemd form's command line."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from strix_pipeline.hosts.box import restore_guard as rg


def sh(script: str, home: Path) -> str:
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True).stdout


def wait_for(path: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and "ok" in path.read_text():
            return True
        time.sleep(0.1)
    return False


def test_the_detached_fallback_outlives_its_shell_retries_a_failed_start_and_records_it(tmp_path):
    started, tries = tmp_path / "started", tmp_path / "tries"
    # the first start fails, the second works: as a production whose first start fails
    start = f'echo x >> {tries}; [ "$(wc -l < {tries})" -ge 2 ] && touch {started}'
    f = rg.Fallback("box", start, delay_s=1, retry_s=1)
    said = sh(rg.arm_script(f), tmp_path)
    assert said.startswith("pid "), said  # no systemd here: the detached form
    state = tmp_path / ".local/state/strix-pipeline"
    assert wait_for(state / "strix-restore-box.fired", 15), "the fallback never fired"
    assert started.exists()
    fired = rg.parse_fired(sh(rg.read_fired_script("box"), tmp_path))
    assert fired is not None and fired.ok and len(fired.attempts) == 2, fired
    assert "attempt 1 exit 1" in fired.attempts[0] and "attempt 2 exit 0" in fired.attempts[1]
    assert not (state / "strix-restore-box.armed").exists()
    assert rg.parse_fired(sh(rg.read_fired_script("box"), tmp_path)) is None  # read once


def test_a_disarmed_fallback_never_fires(tmp_path):
    started = tmp_path / "started"
    sh(rg.arm_script(rg.Fallback("box", f"touch {started}", delay_s=2)), tmp_path)
    sh(rg.disarm_script("box"), tmp_path)
    time.sleep(3)
    assert not started.exists()


def test_the_systemd_form_is_a_transient_timer_at_the_delay():
    argv = rg.systemd_run_argv(rg.Fallback("strix halo", "docker start llama-prod", delay_s=1234), user=True)
    assert argv[:6] == [
        "systemd-run",
        "--user",
        "--unit=strix-restore-strix_halo",
        "--on-active=1234s",
        "--timer-property=AccuracySec=1s",
        "--collect",
    ]
    assert argv[6:8] == ["/bin/sh", "-c"] and "docker start llama-prod" in argv[8]
