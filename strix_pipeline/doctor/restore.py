"""Production's restore on the Box outside the controller: linger for the Box user (the restore timer
outlives the controller's ssh session) and, when production's commands run sudo, the rule that lets
them run without a password; each missing one with the one command that fixes it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.doctor.check import Check
from strix_pipeline.hosts.box.production import ssh_prefix
from strix_pipeline.hosts.box.restore_ready import (
    LINGER,
    LINGER_SCRIPT,
    SUDO,
    linger_readiness,
    sudo_commands,
    sudo_readiness,
    sudo_script,
)
from strix_pipeline.hosts.docker.ssh import SshTarget


def _box_shell(target: SshTarget | None, script: str) -> str:
    """``script`` run by the Box's ``sh`` (over ssh; here for a local Docker host): its stdout, or
    RuntimeError with the end of its stderr."""
    out = subprocess.run(
        ssh_prefix(target, ["sh", "-c", script]), capture_output=True, text=True, timeout=60, check=False
    )
    if out.returncode != 0:
        err = target.redact(out.stderr) if target else out.stderr
        raise RuntimeError(f"exit {out.returncode}: {err.strip()[-300:]}")
    return out.stdout


def _restore(host: str, cfg: DockerHostConfig, target: SshTarget | None) -> Iterator[Check]:
    if cfg.production is None:
        return
    try:
        r = linger_readiness(_box_shell(target, LINGER_SCRIPT))
        yield Check(host, r.name, r.ok, True, r.detail, r.fix)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        yield Check(host, LINGER, False, True, f"not read: {e}"[:400], "check the ssh login to the Box")
    commands = sudo_commands(cfg.production)
    if not commands:
        return
    try:
        r = sudo_readiness(commands, _box_shell(target, sudo_script(commands)))
        yield Check(host, r.name, r.ok, True, r.detail, r.fix)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        yield Check(host, SUDO, False, True, f"not read: {e}"[:400], "check the ssh login to the Box")
