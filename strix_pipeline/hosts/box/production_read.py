"""Production read as deployed, read-only, over the access the pipeline already has: a container by the
Docker API (``docker inspect`` of it and of its image), a systemd unit by ``systemctl show`` over the
Box's ssh (hosts/docker/ssh.py) -- a unit's ``docker run`` then by the inspect of the image it names,
a unit's binary by its ``--version`` (its llama.cpp build). Nothing here starts, stops or changes
anything: ``--version`` prints and exits.

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
from strix_pipeline.planning.container_run import (
    ContainerRun,
    parse_container_run,
    parse_env_file,
    resolve_env,
)
from strix_pipeline.planning.production_baseline import (
    Backend,
    Mount,
    ProductionRead,
    ProductionReadError,
    parse_build,
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


def read_unit(
    ssh: SshTarget | None, unit: str, client: Any = None, *, timeout_s: float = 30
) -> ProductionRead:
    """A systemd unit's ``ExecStart`` and ``Environment`` (over the Box's ssh; here when it is local):
    the container its ``docker run`` starts, else the binary it runs with that binary's build."""
    show = ["systemctl", "show", "-p", "ExecStart", "-p", "Environment", unit]
    done, err = _on_box(ssh, show, timeout_s)
    if done.returncode != 0:
        raise ProductionReadError(f"systemctl show {unit}: exit {done.returncode}: {err[-300:]}")
    command, env = parse_systemctl_show(done.stdout)
    if not command:
        raise ProductionReadError(f"systemctl show {unit}: no ExecStart ({shlex.quote(done.stdout[:200])})")
    run = parse_container_run(command)
    if run is not None:
        from_files = [e for path in run.env_files for e in _env_file(ssh, unit, path, timeout_s)]
        return _unit_container(client, unit, run, resolve_env([*from_files, *run.env], env))
    build, backend = read_build(ssh, command[0], timeout_s=timeout_s)
    return ProductionRead(kind="unit", name=unit, argv=command, env=env, build=build, build_backend=backend)


def _on_box(
    ssh: SshTarget | None, argv: list[str], timeout_s: float
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``argv`` run where production lives (over the Box's ssh; here when it is local), and its stderr
    with the ssh secrets redacted."""
    done = subprocess.run(
        ssh_prefix(ssh, argv), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    err = (done.stderr or "").strip()
    return done, ssh.redact(err) if ssh else err


def _env_file(ssh: SshTarget | None, unit: str, path: str, timeout_s: float) -> list[str]:
    """An ``--env-file`` of a unit's ``docker run``, read where the CLI reads it: on the Box."""
    done, err = _on_box(ssh, ["cat", "--", path], timeout_s)
    if done.returncode != 0:
        raise ProductionReadError(
            f"unit {unit}: its docker run's --env-file {path} cannot be read by the ssh user "
            f"(exit {done.returncode}: {err[-200:]}); make it readable to that user or pass "
            "the variables with -e in the unit"
        )
    return parse_env_file(done.stdout, path)


def _unit_container(client: Any, unit: str, run: ContainerRun, env: tuple[str, ...]) -> ProductionRead:
    """A unit's ``docker run``: the image it names as the Box's Docker has it (its digest, entrypoint and
    default command), the run's arguments, its environment (``env``: its env files, then ``-e``, bare
    names with the unit's values), mounts, devices."""
    if client is None:
        raise ProductionReadError(
            f"unit {unit} runs `{run.cli} run {run.image}`: no Docker client to read it"
        )
    try:
        image = client.api.inspect_image(run.image)
    except Exception as e:  # noqa: BLE001 - docker-py's NotFound and API errors alike
        raise ProductionReadError(
            f"unit {unit} runs `{run.cli} run {run.image}`: that image is not in the Box's Docker "
            f"({type(e).__name__}: {e})"
        ) from e
    cfg = image.get("Config") or {}
    entrypoint = run.entrypoint if run.entrypoint is not None else tuple(cfg.get("Entrypoint") or ())
    command = run.command or tuple(cfg.get("Cmd") or ())
    return ProductionRead(
        kind="unit",
        name=unit,
        argv=(*entrypoint, *command),
        env=env,
        image=run.image,
        image_digest=_image_digest(run.image, image.get("RepoDigests") or [], image.get("Id") or ""),
        mounts=run.mounts,
        devices=run.devices,
    )


def read_build(
    ssh: SshTarget | None, binary: str, *, timeout_s: float = 30
) -> tuple[str | None, Backend | None]:
    """A production binary's llama.cpp build and the backend its ``--version`` names (None, None when
    it cannot say: the baseline then has no engine build to match)."""
    argv = ssh_prefix(ssh, [binary, "--version"])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    return parse_build(f"{done.stdout}\n{done.stderr}")


def read_production(production: ProductionEngine, client: Any, ssh: SshTarget | None) -> ProductionRead:
    """Production as configured: its container, else its unit; neither: it cannot be read."""
    if production.container:
        return read_container(client, production.container)
    if production.unit:
        return read_unit(ssh, production.unit, client)
    raise ProductionReadError(
        "production has neither `container` nor `unit`: its stop/start commands say nothing of what it runs"
    )
