"""A systemd unit's ``docker run`` / ``podman run`` as what it starts: the image, the arguments after it,
the options that shape the engine (environment, its env files, mounts, devices), read the way the
container CLI reads them."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from strix_pipeline.planning.production_baseline import Mount, ProductionReadError

# docker/podman run's options that take no value (the rest take one, or are written --opt=value)
RUN_SWITCHES = frozenset(
    {"--rm", "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--privileged", "--init",
     "--read-only", "-P", "--publish-all", "-q", "--quiet", "--replace", "--rmi", "--no-healthcheck",
     "--oom-kill-disable", "--no-hosts", "--disable-content-trust"}
)  # fmt: skip
CONTAINER_CLIS = frozenset({"docker", "podman"})


@dataclass(frozen=True)
class ContainerRun:
    """What a unit's ``docker run`` / ``podman run`` starts: the image as named, the arguments after it,
    the options that shape what runs (the rest -- name, network, restart -- do not change the engine)."""

    cli: str
    image: str
    command: tuple[str, ...]
    entrypoint: tuple[str, ...] | None  # --entrypoint; None: the image's own
    env: tuple[str, ...]  # -e NAME=value, or NAME alone (the CLI's environment's value)
    mounts: tuple[Mount, ...]
    devices: tuple[str, ...]  # host:container, as a container's inspect gives them
    env_files: tuple[str, ...] = ()  # --env-file paths on the Box, read before -e (which overrides them)


def _volume(spec: str) -> Mount:
    """``-v /srv/models:/models:ro``, ``--mount type=bind,source=…,target=…``."""
    if "=" in spec.split(",", 1)[0]:
        fields = dict(p.split("=", 1) for p in spec.split(",") if "=" in p)
        src = fields.get("source") or fields.get("src") or ""
        return Mount(src, fields.get("target") or fields.get("destination") or fields.get("dst") or "")
    src, _, rest = spec.partition(":")
    return Mount(src, rest.split(":", 1)[0] or src)


def parse_container_run(argv: tuple[str, ...]) -> ContainerRun | None:
    """``[sudo] docker|podman [container] run [options] IMAGE [arguments]`` as a :class:`ContainerRun`;
    None when ``argv`` is no container run."""
    args = list(argv[1:] if argv[:1] == ("sudo",) else argv)
    if not args or PurePosixPath(args[0]).name not in CONTAINER_CLIS:
        return None
    cli, rest = PurePosixPath(args[0]).name, args[1:]
    if rest[:1] == ["run"]:
        rest = rest[1:]
    elif rest[:2] == ["container", "run"]:
        rest = rest[2:]
    else:
        return None
    env: list[str] = []
    env_files: list[str] = []
    mounts: list[Mount] = []
    devices: list[str] = []
    entrypoint: tuple[str, ...] | None = None
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok == "--":
            i += 1
            break
        if not tok.startswith("-") or tok == "-":
            break
        name, eq, value = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        switch = name in RUN_SWITCHES or (
            not tok.startswith("--") and len(tok) > 2 and set(tok[1:]) <= set("dit")
        )  # -it, -dit
        if not eq and switch:
            i += 1
            continue
        if not eq:
            if i + 1 >= len(rest):
                return None
            value = rest[i + 1]
            i += 1
        i += 1
        if name in ("-e", "--env"):
            env.append(value)
        elif name == "--env-file":
            env_files.append(value)
        elif name in ("-v", "--volume", "--mount"):
            mounts.append(_volume(value))
        elif name == "--device":
            host, _, inside = value.partition(":")
            devices.append(f"{host}:{inside.split(':', 1)[0] or host}")
        elif name == "--entrypoint":
            entrypoint = tuple(shlex.split(value))
    if i >= len(rest):
        return None
    return ContainerRun(
        cli=cli,
        image=rest[i],
        command=tuple(rest[i + 1 :]),
        entrypoint=entrypoint,
        env=tuple(env),
        mounts=tuple(sorted(mounts, key=lambda m: m.destination)),
        devices=tuple(sorted(devices)),
        env_files=tuple(env_files),
    )


def parse_env_file(text: str, path: str) -> list[str]:
    """An ``--env-file``'s entries as the Docker CLI reads them: ``NAME=value`` taken literally (no
    quotes, no expansion), ``NAME`` alone for the CLI's own value, blank and ``#`` lines skipped."""
    entries: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        name = line.split("=", 1)[0]
        if not name or any(c.isspace() for c in name):
            raise ProductionReadError(
                f"--env-file {path} line {number}: variable {name!r} is no variable name"
            )
        entries.append(line if "=" in line else name)
    return entries


def resolve_env(entries: list[str], cli_env: tuple[str, ...]) -> tuple[str, ...]:
    """``NAME=value`` for each entry in order, a later one replacing an earlier of the same name; a bare
    ``NAME`` takes its value in ``cli_env`` (``NAME=value``: the environment of the CLI that ran) and is
    left out without one."""
    given = dict(e.split("=", 1) for e in cli_env if "=" in e)
    env: dict[str, str] = {}
    for e in entries:
        name, eq, value = e.partition("=")
        if eq:
            env[name] = value
        elif name in given:
            env[name] = given[name]
    return tuple(f"{k}={v}" for k, v in env.items())
