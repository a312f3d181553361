"""Production read as deployed, read-only, over the access the pipeline already has: a container by the
Docker API (``docker inspect`` of it and of its image), a systemd unit by ``systemctl show`` over the
Box's ssh (hosts/docker/ssh.py). Nothing here starts, stops or changes anything.

What the read gives is planning/production_baseline.py's :class:`ProductionRead`; the baseline it
gives is derived there.
"""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

from strix_pipeline.config import ProductionEngine
from strix_pipeline.hosts.box.production import ssh_prefix
from strix_pipeline.hosts.docker.ssh import SshTarget
from strix_pipeline.planning.production_baseline import (
    Mount,
    ProductionRead,
    ProductionReadError,
    parse_systemctl_show,
)


def _repo(ref: str) -> str:
    """A reference's repository, without its tag or digest (a registry's port kept)."""
    ref = ref.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return ref[: len(ref) - len(last)] + last.split(":", 1)[0]


def _image_digest(configured: str, repo_digests: list[str], image_id: str) -> str:
    """The repository digest of the reference production was started from (``repo@sha256:…``), else
    the first one the image has, else its id (an image built on the Box, never pushed)."""
    want = _repo(configured)
    for d in repo_digests:
        if _repo(d) == want:
            return d
    return repo_digests[0] if repo_digests else image_id


def read_container(client: Any, name: str) -> ProductionRead:
    """A production container as ``docker inspect`` shows it: its image by digest, its entrypoint and
    command, the environment it was given beyond its image's own, its mounts and devices."""
    attrs = client.api.inspect_container(name)
    cfg, host_cfg = attrs.get("Config") or {}, attrs.get("HostConfig") or {}
    image_id = attrs.get("Image") or ""
    image = client.api.inspect_image(image_id)
    own = set((image.get("Config") or {}).get("Env") or [])
    argv = [*(cfg.get("Entrypoint") or []), *(cfg.get("Cmd") or [])]
    mounts = [
        Mount(m.get("Source") or "", m.get("Destination") or "")
        for m in attrs.get("Mounts") or []
        if m.get("Type") in ("bind", "volume", None)
    ]
    devices = [
        f"{d.get('PathOnHost')}:{d.get('PathInContainer')}" for d in host_cfg.get("Devices") or [] if d
    ]
    return ProductionRead(
        kind="container",
        name=name,
        argv=tuple(argv),
        env=tuple(e for e in cfg.get("Env") or [] if e not in own),
        image=cfg.get("Image"),
        image_digest=_image_digest(cfg.get("Image") or "", image.get("RepoDigests") or [], image_id),
        mounts=tuple(sorted(mounts, key=lambda m: m.destination)),
        devices=tuple(sorted(devices)),
    )


def read_unit(ssh: SshTarget | None, unit: str, *, timeout_s: float = 30) -> ProductionRead:
    """A systemd unit's ``ExecStart`` and ``Environment`` (over the Box's ssh; here when it is local)."""
    argv = ssh_prefix(ssh, ["systemctl", "show", "-p", "ExecStart", "-p", "Environment", unit])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        err = ssh.redact(done.stderr or "") if ssh else done.stderr or ""
        raise ProductionReadError(f"systemctl show {unit}: exit {done.returncode}: {err.strip()[-300:]}")
    command, env = parse_systemctl_show(done.stdout)
    if not command:
        raise ProductionReadError(f"systemctl show {unit}: no ExecStart ({shlex.quote(done.stdout[:200])})")
    return ProductionRead(kind="unit", name=unit, argv=command, env=env)


def read_production(production: ProductionEngine, client: Any, ssh: SshTarget | None) -> ProductionRead:
    """Production as configured: its container, else its unit; neither: it cannot be read."""
    if production.container:
        return read_container(client, production.container)
    if production.unit:
        return read_unit(ssh, production.unit)
    raise ProductionReadError(
        "production has neither `container` nor `unit`: its stop/start commands say nothing of what it runs"
    )
