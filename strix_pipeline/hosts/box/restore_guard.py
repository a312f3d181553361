"""A restore of production armed on the Box itself, so production comes back without the controller.

Before production is stopped, :func:`arm_script` is run on the Box (over ssh, or here for a local
Docker host). It schedules the restore for the restore's time on the Box: a transient systemd timer
(``systemd-run --on-active=…``) where systemd runs, else a detached ``setsid nohup sh -c 'sleep N; …'``
that outlives the ssh session. A user's timer lives in that user's manager, which stops with the user's
last session unless linger is on: the arm refuses then (:data:`NO_LINGER`), so production is never
stopped with a restore that would die with the controller's ssh session.

When it fires, the restore removes every container the pipeline started (``strix.managed``: an engine
left running would share the unified memory with production), starts production, and waits for its
health URL, starting it again while the window lasts. Each step is written to
``<state>/restore-<host>.fired`` on the Box, ending ``restored`` only when production answered, else
``failed <why>``; a later run reads it (:func:`read_fired_script`). The controller disarms it
(:func:`disarm_script`) once it restored production itself; a controller killed mid-benchmark, an ssh
link dropped at the restore or a start that failed leave it armed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

# on the Box, in the ssh user's home: readable by that user whatever the controller's paths are
STATE_DIR = '"${XDG_STATE_HOME:-$HOME/.local/state}/strix-pipeline"'
ATTEMPTS = 3  # starts the fallback tries (one may fail as a start of the controller's did)
RETRY_S = 5
MANAGED_FILTER = "label=strix.managed=true"  # the pipeline's engine containers (hosts/guards.py)
# the arm's exit status when the user's manager would not outlive the session: no linger
NO_LINGER = 3
RESTORED = "restored"
FAILED = "failed"


def unit_name(host_name: str) -> str:
    """The transient unit's name (systemd unit names: ASCII letters, digits, ``:-_.\\``)."""
    return "strix-restore-" + re.sub(r"[^A-Za-z0-9_.-]", "_", host_name)


@dataclass(frozen=True)
class Fallback:
    """What the Box runs at ``delay_s`` from now: remove the pipeline's containers, run ``start`` (a
    shell command), wait for ``health_url``; the start retried while ``window_s`` lasts."""

    host_name: str
    start: str
    delay_s: int
    health_url: str | None = None  # None: the start's exit status is all there is to go by
    window_s: int = 360  # from the firing to the end of the planned outage
    health_wait_s: int = 300  # how long one start may take to answer
    attempts: int = ATTEMPTS
    retry_s: int = RETRY_S
    docker: str = "docker"

    @property
    def name(self) -> str:
        return unit_name(self.host_name)

    def body(self) -> str:
        """The restore itself, every step appended to the fired file, ``restored`` last when production
        answered its health URL, else ``failed <why>``; the armed file removed (nothing is armed any
        more)."""
        d, n, dk = STATE_DIR, self.name, self.docker
        url = shlex.quote(self.health_url or "")
        # curl where the Box has it, else busybox's or GNU wget; no URL: a start that exits 0 is it
        health = (
            '[ -z "$U" ] || curl -fsS -o /dev/null -m 5 "$U" >/dev/null 2>&1 '
            '|| wget -q -O /dev/null -T 5 "$U" >/dev/null 2>&1'
        )
        return (
            f'D={d}; mkdir -p "$D"; F="$D/{n}.fired"; L="$D/{n}.log"; U={url}; '
            f"end=$(( $(date +%s) + {self.window_s} )); "
            'r() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $*" >>"$F"; }; '
            f"h() {{ {health}; }}; "
            'if [ -n "$U" ] && ! command -v curl >/dev/null 2>&1 && ! command -v wget >/dev/null 2>&1; '
            'then r "neither curl nor wget on the Box: $U cannot be asked"; fi; '
            f'ids=$({dk} ps -aq --filter {MANAGED_FILTER} 2>>"$L"); '
            f'if [ -n "$ids" ]; then {dk} rm -f $ids >>"$L" 2>&1; '
            'r "removed managed containers" $ids "exit $?"; fi; '
            "ok=; why=; i=0; "
            f'while [ -z "$ok" ] && [ $i -lt {self.attempts} ]; do i=$((i+1)); '
            f'( {self.start} ) >>"$L" 2>&1; rc=$?; r "attempt $i exit $rc"; '
            'if [ $rc -ne 0 ]; then why="the start exited $rc"; else '
            f"t=$(( $(date +%s) + {self.health_wait_s} )); [ $t -gt $end ] && t=$end; "
            "while :; do if h; then ok=1; break; fi; [ $(date +%s) -ge $t ] && break; sleep 1; done; "
            f'[ -n "$ok" ] || why="$U did not answer within {self.health_wait_s} s of the start"; fi; '
            '[ -n "$ok" ] && break; [ $(date +%s) -ge $end ] && break; '
            f"sleep {self.retry_s}; done; "
            f'if [ -n "$ok" ]; then r "${{U:-production}} answered"; echo {RESTORED} >>"$F"; '
            f'else echo "{FAILED} $why" >>"$F"; fi; '
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
    ``armed <kind> <id>``; a fallback still armed from before is replaced. A user's timer without
    linger would stop with the user's last session: refused (exit :data:`NO_LINGER`, the command that
    turns linger on said on stderr)."""
    d, n = STATE_DIR, f.name
    root = shlex.join(systemd_run_argv(f))
    user = shlex.join(systemd_run_argv(f, user=True))
    detached = shlex.join(["sh", "-c", f"sleep {f.delay_s}; {f.body()}"])
    return (
        f'D={d}; mkdir -p "$D" || exit 1; rm -f "$D/{n}.fired"; {disarm_script(f.host_name)}; '
        "if command -v systemd-run >/dev/null 2>&1 && [ -d /run/systemd/system ]; then "
        f'if [ "$(id -u)" = 0 ]; then {root} || exit 1; U=; else {linger_script()}; '
        f"{user} || exit 1; U=--user; fi; "
        f'echo "systemd {n}.timer $U" >"$D/{n}.armed"; '
        f"else setsid nohup {detached} </dev/null >/dev/null 2>&1 & "
        f'echo "pid $!" >"$D/{n}.armed"; fi; cat "$D/{n}.armed"'
    )


def linger_script() -> str:
    """Exits :data:`NO_LINGER` (saying the fix on stderr) unless linger is on for the current user."""
    return (
        'u=$(id -un); case "$(loginctl show-user "$u" -p Linger 2>/dev/null)" in Linger=yes) ;; '
        '*) echo "linger is off for $u: its systemd user manager, and the restore timer with it, stops '
        'when its last session ends; turn it on: sudo loginctl enable-linger $u" >&2; '
        f"exit {NO_LINGER} ;; esac"
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

    attempts: list[str]  # "<time> attempt N exit RC", "<time> removed …", "<time> <url> answered"
    ok: bool  # production answered its health URL
    reason: str | None = None  # why not, when it did not

    @property
    def at(self) -> str:
        return self.attempts[-1].split()[0] if self.attempts else "?"

    def describe(self) -> str:
        steps = "; ".join(self.attempts) or "no attempt recorded"
        return f"{steps}; {FAILED}: {self.reason}" if self.reason else steps


def parse_fired(text: str) -> Fired | None:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    failed = [ln[len(FAILED) :].strip() for ln in lines if ln == FAILED or ln.startswith(FAILED + " ")]
    steps = [ln for ln in lines if ln != RESTORED and not (ln == FAILED or ln.startswith(FAILED + " "))]
    return Fired(steps, RESTORED in lines, (failed[-1] or "unknown") if failed else None)
