"""A restore of production armed on the Box itself, so production comes back without the controller.

Before production is stopped, :func:`arm_script` is run on the Box (over ssh, or here for a local
Docker host). It schedules production's start for the window's end on the Box: a transient systemd
timer (``systemd-run --on-active=…``) where systemd runs, else a detached ``setsid nohup sh -c 'sleep
N; …'`` that outlives the ssh session. Either way the start is tried a few times and each attempt is
written to ``<state>/restore-<host>.fired`` on the Box, which a later run reads (:func:`read_fired_script`)
to say production was restored by the fallback. The controller disarms it (:func:`disarm_script`) once
it restored production itself; a controller killed mid-benchmark, an ssh link dropped at the restore or
a start that failed leave it armed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

# on the Box, in the ssh user's home: readable by that user whatever the controller's paths are
STATE_DIR = '"${XDG_STATE_HOME:-$HOME/.local/state}/strix-pipeline"'
ATTEMPTS = 3  # starts the fallback tries (one may fail as a start of the controller's did)
RETRY_S = 5


def unit_name(host_name: str) -> str:
    """The transient unit's name (systemd unit names: ASCII letters, digits, ``:-_.\\``)."""
    return "strix-restore-" + re.sub(r"[^A-Za-z0-9_.-]", "_", host_name)


@dataclass(frozen=True)
class Fallback:
    """What the Box runs at ``delay_s`` from now: ``start`` (a shell command), retried."""

    host_name: str
    start: str
    delay_s: int
    attempts: int = ATTEMPTS
    retry_s: int = RETRY_S

    @property
    def name(self) -> str:
        return unit_name(self.host_name)

    def body(self) -> str:
        """The restore itself: each attempt's exit status appended to the fired file, ``ok`` last when
        one succeeded; the armed file removed (nothing is armed any more)."""
        d, n = STATE_DIR, self.name
        return (
            f'D={d}; mkdir -p "$D"; i=0; while [ $i -lt {self.attempts} ]; do i=$((i+1)); '
            f'( {self.start} ) >>"$D/{n}.log" 2>&1; rc=$?; '
            f'echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) attempt $i exit $rc" >>"$D/{n}.fired"; '
            f'if [ $rc -eq 0 ]; then echo ok >>"$D/{n}.fired"; break; fi; sleep {self.retry_s}; done; '
            f'rm -f "$D/{n}.armed"'
        )


def systemd_run_argv(f: Fallback, *, user: bool = False) -> list[str]:
    """The transient timer on a Box with systemd: fires once ``delay_s`` from now, collected after."""
    return [
        "systemd-run",
        *(["--user"] if user else []),
        f"--unit={f.name}",
        f"--on-active={f.delay_s}s",
        "--timer-property=AccuracySec=1s",
        "--collect",
        "/bin/sh",
        "-c",
        f.body(),
    ]


def arm_script(f: Fallback) -> str:
    """Arms the fallback on the Box (systemd where it runs, else a detached sleeper) and prints
    ``armed <kind> <id>``; a fallback still armed from before is replaced."""
    d, n = STATE_DIR, f.name
    root = shlex.join(systemd_run_argv(f))
    user = shlex.join(systemd_run_argv(f, user=True))
    detached = shlex.join(["sh", "-c", f"sleep {f.delay_s}; {f.body()}"])
    return (
        f'D={d}; mkdir -p "$D" || exit 1; rm -f "$D/{n}.fired"; {disarm_script(f.host_name)}; '
        "if command -v systemd-run >/dev/null 2>&1 && [ -d /run/systemd/system ]; then "
        f'if [ "$(id -u)" = 0 ]; then {root} || exit 1; U=; else {user} || exit 1; U=--user; fi; '
        f'echo "systemd {n}.timer $U" >"$D/{n}.armed"; '
        f"else setsid nohup {detached} </dev/null >/dev/null 2>&1 & "
        f'echo "pid $!" >"$D/{n}.armed"; fi; cat "$D/{n}.armed"'
    )


def disarm_script(host_name: str) -> str:
    """Stops an armed fallback (its timer, or the sleeper's whole process group); nothing armed: no-op."""
    d, n = STATE_DIR, unit_name(host_name)
    return (
        f'D={d}; if [ -f "$D/{n}.armed" ]; then read kind id u <"$D/{n}.armed"; '
        'case "$kind" in systemd) systemctl $u stop "$id" >/dev/null 2>&1 ;; '
        'pid) kill -TERM -- "-$id" 2>/dev/null || kill -TERM "$id" 2>/dev/null ;; esac; '
        f'rm -f "$D/{n}.armed"; fi; true'
    )


def read_fired_script(host_name: str) -> str:
    """Prints what the fallback did (its attempts, ``ok`` when one started production) and forgets it."""
    d, n = STATE_DIR, unit_name(host_name)
    return f'D={d}; if [ -f "$D/{n}.fired" ]; then cat "$D/{n}.fired"; rm -f "$D/{n}.fired"; fi; true'


@dataclass(frozen=True)
class Fired:
    """What :func:`read_fired_script` printed."""

    attempts: list[str]  # "<time> attempt N exit RC"
    ok: bool

    @property
    def at(self) -> str:
        return self.attempts[-1].split()[0] if self.attempts else "?"

    def describe(self) -> str:
        return "; ".join(self.attempts) or "no attempt recorded"


def parse_fired(text: str) -> Fired | None:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    return Fired([ln for ln in lines if ln != "ok"], "ok" in lines)
