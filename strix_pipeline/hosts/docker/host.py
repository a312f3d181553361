"""A Docker host: its client (local socket or the Box over ``ssh://``), its video/render groups and its
memory probe."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.hosts.docker.ssh import client_transport, docker_client, ssh_target
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.memory import DockerProbe, MemoryProbe, TreeProbe

log = logging.getLogger(__name__)


def docker_url(host: DockerHostConfig) -> str:
    """``host.docker_host`` with ``{user}`` filled from the environment variable ``ssh_user_env``.

    The result may hold the secret user: for messages use ``host.docker_host`` (the template) or
    :attr:`SshTarget.display`."""
    url = host.docker_host or "unix:///var/run/docker.sock"
    if "{user}" in url:
        user = os.environ.get(host.ssh_user_env or "", "")
        if not user:
            raise EngineStartError(
                "failed_guard", f"docker_host {url} needs the user in ${host.ssh_user_env}"
            )
        url = url.replace("{user}", user)
    return url


def make_client(host: DockerHostConfig, *, timeout_s: int = 300) -> Any:
    """A docker-py client of the host's daemon. ``ssh://`` goes through the system ssh with the
    host's key, known_hosts and timeouts (hosts/docker/ssh.py); the connection is checked at once, so a
    refused key or an unreachable Box is a ``failed_guard`` naming the host and the key variable."""
    target = ssh_target(host)
    if target is not None:
        return docker_client(target, timeout_s=timeout_s)
    import docker

    return docker.DockerClient(base_url=docker_url(host), timeout=timeout_s)


def host_error(client: Any, error: BaseException) -> str:
    """What a failed Docker call means: the lost ssh connection (with ssh's words) when the client's
    transport lost one, else the error itself."""
    transport = client_transport(client)
    lost = transport.lost_since() if transport else []
    if lost:
        return f"lost the ssh connection to the Docker host {transport.target.display} {lost[-1].describe()}"
    return f"{type(error).__name__}: {error}"


def is_local_daemon(host: DockerHostConfig) -> bool:
    url = host.docker_host or ""
    return url.startswith("unix://") or url.startswith("npipe://") or url in ("", "local")


def split_image_ref(ref: str) -> tuple[str, str]:
    """(repository, tag or digest); ``repo:tag@sha256:…`` pulls by the digest alone."""
    if "@" in ref:
        repo, digest = ref.rsplit("@", 1)
        last = repo.rsplit("/", 1)[-1]
        if ":" in last:  # drop the tag: the digest is what we asked for
            repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
        return repo, digest
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        return ref[: len(ref) - len(last)] + last.split(":", 1)[0], last.split(":", 1)[1]
    return ref, "latest"


def parse_group_file(text: str, names: tuple[str, ...] = ("video", "render")) -> dict[str, int]:
    """``/etc/group`` lines ``name:x:gid:members`` -> {name: gid} for the wanted names."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[0] in names:
            try:
                out[parts[0]] = int(parts[2])
            except ValueError:
                continue
    return out


def resolve_group_ids(host: DockerHostConfig, client: Any) -> list[int]:
    """Numeric video/render gids of the host (container group names mean nothing on the host).

    From the config when given; otherwise read from the host's /etc/group through the probe image
    (over ssh as well), or locally when the daemon is on this machine. No devices: no groups.
    """
    if not host.devices:
        return []
    gids = {"video": host.video_gid, "render": host.render_gid}
    if None in gids.values():
        text = ""
        if host.probe_image:
            try:
                raw = client.containers.run(
                    host.probe_image,
                    ["sh", "-c", "cat /host/etc/group"],
                    remove=True,
                    network_mode="host",
                    volumes={"/etc/group": {"bind": "/host/etc/group", "mode": "ro"}},
                    labels={"strix.probe": "true"},
                )
                text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and image errors alike: the gids stay unknown
                log.warning("could not read the host's /etc/group through %s: %s", host.probe_image, e)
        elif is_local_daemon(host):
            try:
                text = Path("/etc/group").read_text()
            except OSError:
                text = ""
        found = parse_group_file(text)
        for name in gids:
            if gids[name] is None:
                gids[name] = found.get(name)
    missing = [n for n, g in gids.items() if g is None]
    if missing:
        log.warning("no gid for group(s) %s on the host: the engine may not open %s", missing, host.devices)
    return [g for g in gids.values() if g is not None]


def probe_for_host(host: DockerHostConfig, client: Any, *, pid: int | None = None) -> MemoryProbe | None:
    """The memory probe of a Docker host: the probe container when configured (works over ssh),
    the local filesystem when the daemon is on this machine, else None (logged)."""
    if host.probe_image:
        return DockerProbe(client, host.probe_image, devices=list(host.devices))
    if is_local_daemon(host):
        return TreeProbe(Path("/"), pid=pid)
    log.warning("host has no probe_image: no memory samples over %s", host.docker_host)
    return None
