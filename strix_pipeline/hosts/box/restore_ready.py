"""Whether the restore armed on the Box will outlive the controller, and whether production's stop and
start may run unattended: read on the Box by one shell script each, judged here.

- linger: on a Box with systemd the restore is a ``systemd-run --user`` timer of the ssh user
  (hosts/box/restore_guard.py); without linger that user's manager, and the timer with it, stops when
  the user's last session closes -- when the controller dies. Root's timer is the system manager's
  and needs none; a Box without systemd gets a detached sleeper, which needs none either.
- the sudo rule: a production whose stop and start commands run ``sudo`` needs them allowed without
  a password (``sudo -n -l`` says so without running them).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from strix_pipeline.config import ProductionEngine

LINGER = "restore outlives the controller"
SUDO = "sudo rule for production"
SUDOERS = "/etc/sudoers.d/strix"

LINGER_SCRIPT = (
    "if command -v systemd-run >/dev/null 2>&1 && [ -d /run/systemd/system ]; then s=yes; else s=no; fi; "
    'u=$(id -un); echo "systemd=$s uid=$(id -u) user=$u $(loginctl show-user "$u" -p Linger 2>/dev/null)"'
)


@dataclass(frozen=True)
class Readiness:
    """One check's verdict: ``fix`` is the one command that makes it ok."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


def _fields(text: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in text.split() if "=" in w)


def linger_readiness(output: str) -> Readiness:
    """:data:`LINGER_SCRIPT`'s output judged."""
    f = _fields(output)
    user = f.get("user", "?")
    if f.get("systemd") == "no":
        return Readiness(LINGER, True, "no systemd: the restore is a detached process that outlives ssh")
    if f.get("uid") == "0":
        return Readiness(LINGER, True, "the ssh user is root: the restore is a system timer")
    if f.get("Linger") == "yes":
        return Readiness(LINGER, True, f"linger is on for {user}: its restore timer outlives its sessions")
    said = f"Linger={f['Linger']}" if "Linger" in f else "loginctl said nothing of it"
    return Readiness(
        LINGER,
        False,
        f"linger is off for {user} ({said}): the restore timer stops with its last ssh session, so a "
        "dead controller leaves production down; a night is refused before production stops",
        f"sudo loginctl enable-linger {user}",
    )


def sudo_commands(production: ProductionEngine | None) -> list[list[str]]:
    """Production's stop and start commands that run through sudo (without its options)."""
    if production is None or production.container:
        return []
    out = []
    for argv in (production.stop_command or [], production.start_command or []):
        if argv and argv[0] == "sudo":
            rest = list(argv[1:])
            while rest and rest[0].startswith("-"):
                rest.pop(0)
            out.append(rest)
    return out


def sudo_script(commands: list[list[str]]) -> str:
    """Prints ``allowed <argv>`` or ``denied <argv>`` per command and, last, ``user=<name>`` and the
    absolute path of each command's program (sudoers wants absolute paths)."""
    lines = [
        f"if sudo -n -l {shlex.join(c)} >/dev/null 2>&1; then echo allowed; else echo denied; fi; "
        f'echo "path=$(command -v {shlex.quote(c[0])} || echo {shlex.quote(c[0])})"; '
        for c in commands
    ]
    return "".join(lines) + 'echo "user=$(id -un)"'


def sudo_readiness(commands: list[list[str]], output: str) -> Readiness:
    """:func:`sudo_script`'s output judged; the fix is one sudoers line for both commands."""
    lines = output.split()
    verdicts = [w for w in lines if w in ("allowed", "denied")]
    paths = [w.split("=", 1)[1] for w in lines if w.startswith("path=")]
    user = next((w.split("=", 1)[1] for w in lines if w.startswith("user=")), "<user>")
    if len(verdicts) != len(commands) or len(paths) != len(commands):
        return Readiness(SUDO, False, f"not read: {output.strip()[:200] or 'no output'}")
    denied = [c for c, v in zip(commands, verdicts, strict=True) if v == "denied"]
    shown = ", ".join(shlex.join(c) for c in commands)
    if not denied:
        return Readiness(SUDO, True, f"{shown}: allowed without a password")
    allowed = ", ".join(shlex.join([p, *c[1:]]) for p, c in zip(paths, commands, strict=True))
    rule = f"{user} ALL=(root) NOPASSWD: {allowed}"
    return Readiness(
        SUDO,
        False,
        f"{', '.join(shlex.join(c) for c in denied)}: needs a password (sudo -n refuses it)",
        f"echo {shlex.quote(rule)} | sudo tee {SUDOERS}",
    )
