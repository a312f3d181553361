"""The Box's own restore (hosts/box/restore_guard.py), run for real by a local sh: armed it fires after
its delay, removes the pipeline's containers first, starts production and records "restored" only once
production answered its health URL (else a failure and why); disarmed it never fires; without linger a
user's timer is refused; the systemd form's command line. ``docker`` and ``loginctl`` are stand-ins."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from strix_pipeline.hosts.box import restore_guard as rg


def stand_ins(home: Path) -> Path:
    """``docker`` listing one managed container (``ps``) and logging what it is asked to remove;
    ``loginctl`` saying what ``linger`` holds."""
    bin_dir = home / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(
        f'#!/bin/sh\ncase "$1" in ps) echo engine123 ;; rm) echo "$@" >> {home}/removed ;; esac\n'
    )
    loginctl = bin_dir / "loginctl"
    loginctl.write_text(f"#!/bin/sh\necho Linger=$(cat {home}/linger 2>/dev/null || echo no)\n")
    for tool in (docker, loginctl):
        tool.chmod(0o755)
    return bin_dir


def sh(script: str, home: Path, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": f"{stand_ins(home)}:/usr/bin:/bin"}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=check)


def wait_for(path: Path, timeout_s: float) -> bool:
    """Until the fallback recorded its end (restored, or failed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and any(w in path.read_text() for w in (rg.RESTORED, rg.FAILED)):
            return True
        time.sleep(0.1)
    return False


@contextmanager
def production_health(up: Path) -> Iterator[str]:
    """A health URL on loopback answering 200 once ``up`` exists (production started), 503 before."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200 if up.exists() else 503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/health"
    finally:
        server.shutdown()


def test_the_detached_fallback_outlives_its_shell_retries_a_failed_start_and_records_it(tmp_path):
    started, tries = tmp_path / "started", tmp_path / "tries"
    # the first start fails, the second works: as a production whose first start fails; production
    # answers a while after its start, as a model loads
    start = f'echo x >> {tries}; [ "$(wc -l < {tries})" -ge 2 ] && {{ (sleep 2; touch {started}) & }}'
    with production_health(started) as url:
        f = rg.Fallback("box", start, delay_s=1, retry_s=1, health_url=url, window_s=20, health_wait_s=10)
        said = sh(rg.arm_script(f), tmp_path).stdout
        assert said.startswith("pid "), said  # no systemd here: the detached form
        state = tmp_path / ".local/state/strix-pipeline"
        assert wait_for(state / "strix-restore-box.fired", 25), "the fallback never fired"
    fired = rg.parse_fired(sh(rg.read_fired_script("box"), tmp_path).stdout)
    assert fired is not None and fired.ok and fired.reason is None, fired
    # the engine the pipeline left is removed before production starts beside it
    assert "removed managed containers engine123 exit 0" in fired.attempts[0]
    assert (tmp_path / "removed").read_text().split() == ["rm", "-f", "engine123"]
    assert "attempt 1 exit 1" in fired.attempts[1] and "attempt 2 exit 0" in fired.attempts[2]
    assert fired.attempts[3].endswith(f"{url} answered")
    assert not (state / "strix-restore-box.armed").exists()
    assert rg.parse_fired(sh(rg.read_fired_script("box"), tmp_path).stdout) is None  # read once


def test_a_start_that_exits_0_but_never_answers_is_recorded_as_failed_with_its_reason(tmp_path):
    never = tmp_path / "never"
    with production_health(never) as url:
        f = rg.Fallback("box", "true", delay_s=1, retry_s=1, health_url=url, window_s=4, health_wait_s=2)
        sh(rg.arm_script(f), tmp_path)
        assert wait_for(tmp_path / ".local/state/strix-pipeline/strix-restore-box.fired", 20)
    fired = rg.parse_fired(sh(rg.read_fired_script("box"), tmp_path).stdout)
    assert fired is not None and not fired.ok, fired
    assert fired.reason == f"{url} did not answer within 2 s of the start", fired
    assert "attempt 1 exit 0" in fired.attempts[1]  # started, tried again while the window lasted
    assert any("attempt 2 exit 0" in a for a in fired.attempts), fired


def test_without_linger_a_users_timer_is_refused_with_the_command_that_fixes_it(tmp_path):
    out = sh(rg.linger_script(), tmp_path, check=False)
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    assert out.returncode == rg.NO_LINGER
    assert f"sudo loginctl enable-linger {user}" in out.stderr
    (tmp_path / "linger").write_text("yes")
    assert sh(rg.linger_script(), tmp_path, check=False).returncode == 0


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


def test_without_a_health_url_a_start_that_exits_0_is_the_restore(tmp_path):
    sh(rg.arm_script(rg.Fallback("box", "true", delay_s=1, retry_s=1, window_s=5)), tmp_path)
    assert wait_for(tmp_path / ".local/state/strix-pipeline/strix-restore-box.fired", 15)
    fired = rg.parse_fired(sh(rg.read_fired_script("box"), tmp_path).stdout)
    assert fired is not None and fired.ok and fired.attempts[-1].endswith("production answered"), fired
