"""A Docker host: its daemon reached (over SSH on the Box, with the key the config names), the probe
image and the devices it sees, the efficiency probe image; then the Box's memory and what the
checks before production stops would find."""

from __future__ import annotations

import os
from collections.abc import Iterator

import docker

from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.doctor.box import _before_stop, _box_memory
from strix_pipeline.doctor.check import Check
from strix_pipeline.doctor.production import _production
from strix_pipeline.doctor.restarters import restarter_checks
from strix_pipeline.doctor.restore import _restore
from strix_pipeline.hosts.docker import host as docker_host
from strix_pipeline.hosts.docker.ssh import SshTarget, SshUserUnset, is_ssh, ssh_target
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.probes import efficiency as efficiency_probe
from strix_pipeline.units import GB


def _docker(config: StrixConfig, host: str, cfg: DockerHostConfig) -> Iterator[Check]:

    url = cfg.docker_host or "?"  # the template: the user filled in would be a secret
    target: SshTarget | None = None
    if is_ssh(cfg):
        yield from _ssh_key(host, cfg)
        try:
            target = ssh_target(cfg)
        except EngineStartError as e:
            fix = (
                f"export {cfg.ssh_user_env}=<user on the Box>"
                if isinstance(e, SshUserUnset)
                else "fix docker_host, the key variable or ssh_known_hosts"
            )
            yield Check(host, "ssh settings", False, True, e.reason, fix)
            return
        assert target is not None
        url = target.display
    try:
        client = docker_host.make_client(cfg, timeout_s=10)
        client.ping()
    except EngineStartError as e:  # ssh's own words, the key variable, how to check
        yield Check(host, "docker reachable", False, True, e.reason[:500], "see the reason")
        return
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket and HTTP errors alike
        yield Check(
            host,
            "docker reachable",
            False,
            True,
            f"{url}: {type(e).__name__}: {e}"[:300],
            "start dockerd or fix docker_host",
        )
        return
    try:
        yield Check(host, "docker reachable", True, True, f"{url}: Docker {client.version().get('Version')}")
        yield from _docker_probe(host, cfg, client)
        yield _efficiency_image(host, cfg, client)
        yield from _box_memory(host, cfg, client)
        yield from _before_stop(config, host, cfg, client, target)
        yield from _production(config, host, cfg, client, target)
        yield from _restore(host, cfg, target)
        yield from restarter_checks(host, cfg, client)
    finally:
        client.close()


def _ssh_key(host: str, cfg: DockerHostConfig) -> Iterator[Check]:
    """The key variable the config names: unset is allowed (ssh's own keys) but said."""
    env = cfg.ssh_key_path_env
    if env and not os.environ.get(env):
        yield Check(
            host,
            "ssh key",
            False,
            False,
            f"${env} is not set: ssh uses its own keys (agent, ~/.ssh/config)",
            f"export {env}=<path of the private key for the Box>",
        )
    elif env:
        yield Check(host, "ssh key", True, True, f"${env} is set")  # its value is a secret


def _docker_probe(host: str, cfg: DockerHostConfig, client: docker.DockerClient) -> Iterator[Check]:
    if not cfg.probe_image:
        yield Check(
            host,
            "probe image",
            False,
            False,
            "no probe_image: no memory samples or host facts from this host",
            "set hosts.<name>.probe_image (a busybox image)",
        )
        return
    try:
        client.images.get(cfg.probe_image)
    except Exception:  # noqa: BLE001 - not present: try to pull it
        try:
            client.images.pull(cfg.probe_image)
        except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and registry errors alike
            yield Check(
                host,
                "probe image",
                False,
                True,
                f"{cfg.probe_image}: {e}"[:300],
                f"docker pull {cfg.probe_image} on the host",
            )
            return
    yield Check(host, "probe image", True, True, cfg.probe_image)
    if not cfg.devices:
        return
    # the devices are arguments of a fixed script, never part of it: a value is never shell text
    argv = ["sh", "-c", 'for d in "$@"; do test -e "$d" || echo "absent $d"; done', "sh", *cfg.devices]
    try:
        out = client.containers.run(
            cfg.probe_image,
            argv,
            remove=True,
            network_mode="host",
            volumes={"/dev": {"bind": "/dev", "mode": "ro"}},
        )
        lines = out.decode().splitlines()
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and container errors alike
        yield Check(
            host, "devices", False, True, f"could not look: {e}"[:300], "check the probe image runs `sh`"
        )
        return
    absent = [d for d in cfg.devices if f"absent {d}" in lines]
    yield Check(
        host,
        "devices",
        not absent,
        True,
        f"absent: {' '.join(absent)}" if absent else " ".join(cfg.devices),
        "install the amdgpu driver / ROCm on the host" if absent else None,
    )


EFFICIENCY = "efficiency probe image"


def _efficiency_image(host: str, cfg: DockerHostConfig, client: docker.DockerClient) -> Check:
    """The image the efficiency probe runs in (hosts/probes/efficiency.py): on the host or pullable, and
    able to run the probe -- its own argv, offline, a tiny buffer. Required when set: the configuration
    asks for the figure, and a broken image would cost it on every run (stored as efficiency_problem)."""
    image = cfg.efficiency_probe_image
    setting = f"hosts.{host}.efficiency_probe_image"
    suggest = (
        f"set {setting} to an image with {cfg.efficiency_probe_python} and numpy (the "
        "official vLLM ROCm image has both; busybox neither)"
    )
    if not image:
        detail = "not set: runs here store their decode speed but no decode efficiency (no bandwidth probe)"
        return Check(host, EFFICIENCY, False, False, detail, suggest)
    try:
        size = int((client.images.get(image).attrs or {}).get("Size") or 0)
    except docker.errors.ImageNotFound:
        return _efficiency_pullable(host, client, image, suggest)
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket and HTTP errors alike
        return Check(host, EFFICIENCY, False, True, f"{image}: not looked up: {e}"[:300], "see the reason")
    # the run's own probe (its container name too: a doctor run during a run's probe replaces it)
    probe, _, why = efficiency_probe.measure_on_host(
        client, cfg, 1, None, timeout_s=120, size_mib=1, time_budget_s=0.2
    )
    # a ROCm image is tens of GB, a test's python image a few hundred MB
    shown = f"{size / GB:.1f} GB" if size >= GB else f"{size / 1e6:.0f} MB"
    on_host = f"{image} ({shown} on the host)" if size else image
    if probe is None:
        return Check(host, EFFICIENCY, False, True, f"{on_host}: {why}", suggest)
    return Check(
        host, EFFICIENCY, True, True, f"{on_host}: {cfg.efficiency_probe_python} with numpy runs the probe"
    )


def _efficiency_pullable(host: str, client: docker.DockerClient, image: str, suggest: str) -> Check:
    """An image not on the host yet: its registry is asked through the host's daemon (its network and
    logins), never pulled here -- a ROCm image is tens of GB, which the first run pulls while
    production still serves (efficiency_probe.prepare_image)."""
    try:
        digest = client.images.get_registry_data(image).id
    # docker-py wraps a registry's refusal, socket and HTTP errors alike
    except Exception as e:  # noqa: BLE001
        said = " ".join(str(getattr(e, "explanation", None) or e).split())[:300]
        return Check(
            host,
            EFFICIENCY,
            False,
            True,
            f"{image}: not on the host, and not pullable: {said}",
            f"check the name and the host's registry login, or {suggest}",
        )
    return Check(
        host,
        EFFICIENCY,
        True,
        True,
        f"{image}: not on the host yet, pullable ({digest[:19]}…); the first run pulls it before "
        "production stops",
        f"docker pull {image} on the host, then strix doctor checks the probe runs in it",
    )
