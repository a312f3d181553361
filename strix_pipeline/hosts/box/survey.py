"""What a new Box has, read there read-only for `strix box init`: its production (the running
llama-server container, or the one named), its video/render groups, its GPU device nodes, its memory
and the GGUF models beside production's."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from strix_pipeline.hosts.box.production import ssh_prefix
from strix_pipeline.hosts.box.production_read import read_container
from strix_pipeline.hosts.docker.host import parse_group_file
from strix_pipeline.hosts.docker.ssh import SshTarget
from strix_pipeline.planning.production_baseline import ProductionRead, ProductionReadError

DEVICE_NODES = ("/dev/kfd", "/dev/dri")


@dataclass
class BoxSurvey:
    production: ProductionRead | None
    production_why: str | None  # why no production was taken
    groups: dict[str, int] = field(default_factory=dict)  # video / render gids
    devices: list[str] = field(default_factory=list)  # of DEVICE_NODES, those present
    mem_total_bytes: int | None = None
    models: list[str] = field(default_factory=list)  # GGUF files found beside production's


def _shell(ssh: SshTarget | None, script: str) -> str:
    argv = ssh_prefix(ssh, ["sh", "-c", script])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return done.stdout if done.returncode == 0 else ""


def _is_llama_server(attrs: dict[str, Any]) -> bool:
    cfg = attrs.get("Config") or {}
    argv = [*(cfg.get("Entrypoint") or []), *(cfg.get("Cmd") or [])]
    return any(PurePosixPath(a).name.startswith("llama-server") for a in argv[:3]) or "llama" in str(
        cfg.get("Image") or ""
    )


def find_production(client: Any, name: str | None) -> tuple[ProductionRead | None, str | None]:
    """The container named, else the one running llama-server container; none or several: why not."""
    if name:
        return read_container(client, name), None
    found = [c for c in client.containers.list() if _is_llama_server(c.attrs)]
    if len(found) != 1:
        names = ", ".join(c.name for c in found) or "none"
        return (
            None,
            f"{len(found)} running llama-server containers ({names}): name production's with --production",
        )
    return read_container(client, found[0].name), None


def survey(client: Any, ssh: SshTarget | None, production: str | None = None) -> BoxSurvey:
    try:
        read, why = find_production(client, production)
    except ProductionReadError as e:
        read, why = None, str(e)
    groups = parse_group_file(_shell(ssh, "cat /etc/group"))
    present = _shell(ssh, " ".join(f"[ -e {d} ] && echo {d};" for d in DEVICE_NODES)).split()
    mem = None
    for line in _shell(ssh, "cat /proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * 1024
    models: list[str] = []
    if read is not None:
        dirs = sorted({m.source for m in read.mounts if m.source})
        for d in dirs:
            listing = _shell(ssh, f"find {shlex.quote(d)} -maxdepth 3 -name '*.gguf' 2>/dev/null | sort")
            models += [line for line in listing.splitlines() if line.strip()]
    return BoxSurvey(read, why, groups, [d for d in DEVICE_NODES if d in present], mem, models)
