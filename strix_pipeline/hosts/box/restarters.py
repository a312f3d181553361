"""Who besides a run can start or replace production's container: its own restart policy, the compose
project it belongs to, a watchtower container on the Box. Read-only (``docker inspect``), for the doctor.

- Its restart policy (``HostConfig.RestartPolicy``) is the run's to handle: suspended before the stop
  and put back after the start (hosts/box/production.py), so it is said, never refused.
- A compose service (the ``com.docker.compose.*`` labels ``docker compose`` puts on each container it
  creates): its ``restart:`` is that same policy, but a ``docker compose up`` during the window (a
  deploy, a cron job) starts or recreates it beside the engine.
- A watchtower container (containrrr/watchtower and its forks; the image labels itself
  ``com.centurylinklabs.watchtower=true``) stops, replaces and starts each container it watches when
  that container's image changes; with ``--include-stopped --revive-stopped`` it starts a stopped one
  too: production back mid-run. It leaves production alone when production carries
  ``com.centurylinklabs.watchtower.enable=false`` (or ``.monitor-only=true``), when it runs with
  ``--label-enable`` and production is not labelled ``enable=true``, ``--monitor-only`` or
  ``--no-restart``, names production in ``--disable-containers``, names other containers only, or
  has a ``--scope`` production is not in. Each option is read from its argument or its
  ``WATCHTOWER_*`` variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strix_pipeline.hosts.box.production import policy_text

WATCHTOWER = "com.centurylinklabs.watchtower"  # watchtower's own image carries it, "true"
ENABLE = f"{WATCHTOWER}.enable"
MONITOR_ONLY = f"{WATCHTOWER}.monitor-only"
SCOPE = f"{WATCHTOWER}.scope"
EXCLUDE = f"{ENABLE}=false"
COMPOSE_PROJECT = "com.docker.compose.project"
COMPOSE_SERVICE = "com.docker.compose.service"
COMPOSE_FILES = "com.docker.compose.project.config_files"

# watchtower's options that take a value (the rest are switches): its CLI reference
_VALUED = frozenset(
    """
-i --interval -s --schedule --scope -x --disable-containers -t --stop-timeout -H --host
--http-api-token -n --notifications --notification-url --notifications-level --notification-template
--notification-title-tag --notifications-delay --notifications-hostname --notification-email-from
--notification-email-to --notification-email-server --notification-email-server-port
--notification-email-server-user --notification-email-server-password --notification-email-delay
--notification-email-subjecttag --notification-slack-hook-url --notification-slack-identifier
--notification-slack-channel --notification-slack-icon-emoji --notification-slack-icon-url
--notification-msteams-hook --notification-gotify-url --notification-gotify-token
--notification-shoutrrr-url -l --log-level --log-format --warn-on-head-failure --api-version -a
""".split()
)
_SWITCHES = {  # the switches read here: their long and short names, their WATCHTOWER_* variable
    "label_enable": (("--label-enable", "-e"), "WATCHTOWER_LABEL_ENABLE"),
    "include_stopped": (("--include-stopped", "-S"), "WATCHTOWER_INCLUDE_STOPPED"),
    "revive_stopped": (("--revive-stopped",), "WATCHTOWER_REVIVE_STOPPED"),
    "monitor_only": (("--monitor-only", "-m"), "WATCHTOWER_MONITOR_ONLY"),
    "no_restart": (("--no-restart",), "WATCHTOWER_NO_RESTART"),
}


def _labels(attrs: Mapping[str, Any]) -> dict[str, str]:
    return dict((attrs.get("Config") or {}).get("Labels") or {})


def _name(attrs: Mapping[str, Any]) -> str:
    return str(attrs.get("Name") or "").lstrip("/") or str(attrs.get("Id") or "?")[:12]


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ComposeService:
    project: str
    service: str
    files: str | None

    def describe(self) -> str:
        where = f" ({self.files})" if self.files else ""
        return f"service {self.service} of compose project {self.project}{where}"


def compose_service(production: Mapping[str, Any]) -> ComposeService | None:
    """The compose project and service production's container was created by, or None."""
    labels = _labels(production)
    if COMPOSE_PROJECT not in labels:
        return None
    return ComposeService(
        labels[COMPOSE_PROJECT], labels.get(COMPOSE_SERVICE) or "?", labels.get(COMPOSE_FILES) or None
    )


def restart_policy(production: Mapping[str, Any]) -> str:
    """``always``, ``on-failure:3``, ``no``: as ``docker update --restart`` takes it."""
    return policy_text((production.get("HostConfig") or {}).get("RestartPolicy") or {})


def is_watchtower(attrs: Mapping[str, Any]) -> bool:
    """Watchtower (or a fork): its image's own label, else an image whose repository is named so."""
    if _true(_labels(attrs).get(WATCHTOWER)):
        return True
    image = str((attrs.get("Config") or {}).get("Image") or "").split("@", 1)[0]
    last = image.rsplit("/", 1)[-1].split(":", 1)[0]
    return last == "watchtower"


@dataclass(frozen=True)
class WatchtowerOptions:
    """What of a watchtower's command line and environment decides whether it touches production."""

    label_enable: bool = False
    include_stopped: bool = False
    revive_stopped: bool = False
    monitor_only: bool = False
    no_restart: bool = False
    disabled: tuple[str, ...] = ()
    scope: str | None = None
    names: tuple[str, ...] = ()  # the containers it is limited to (its positional arguments); () all

    @classmethod
    def read(cls, attrs: Mapping[str, Any]) -> WatchtowerOptions:
        cfg = attrs.get("Config") or {}
        env = dict(str(e).split("=", 1) for e in cfg.get("Env") or [] if "=" in str(e))
        given: dict[str, str] = {}  # option -> value ("true" for a bare switch)
        names: list[str] = []
        args = [str(a) for a in cfg.get("Cmd") or []]
        i = 0
        while i < len(args):
            arg = args[i]
            if arg.startswith("-"):
                opt, eq, value = arg.partition("=")
                if not eq and opt in _VALUED and i + 1 < len(args):
                    value, i = args[i + 1], i + 1
                given[opt] = value if (eq or opt in _VALUED) else "true"
            else:
                names.append(arg.lstrip("/"))
            i += 1

        def switch(field: str) -> bool:
            flags, var = _SWITCHES[field]
            return any(_true(given.get(f)) for f in flags) or _true(env.get(var))

        def valued(flags: tuple[str, ...], var: str) -> str | None:
            return next((given[f] for f in flags if f in given), None) or env.get(var) or None

        disabled = valued(("--disable-containers", "-x"), "WATCHTOWER_DISABLE_CONTAINERS") or ""
        return cls(
            **{f: switch(f) for f in _SWITCHES},
            disabled=tuple(n.strip().lstrip("/") for n in disabled.replace(" ", ",").split(",") if n.strip()),
            scope=valued(("--scope",), "WATCHTOWER_SCOPE"),
            names=tuple(names),
        )


@dataclass(frozen=True)
class Watchtower:
    """A watchtower container on the Box and what it would do to production."""

    name: str
    watches: bool  # it would stop, replace and start production when production's image changes
    revives: bool  # ... and start it while a run holds it stopped
    why: str

    def describe(self) -> str:
        return f"watchtower container {self.name}: {self.why}"


def judge(watchtower: Mapping[str, Any], production: Mapping[str, Any]) -> Watchtower:
    """Whether ``watchtower`` (its ``docker inspect``) touches ``production`` (its ``docker inspect``)."""
    o, labels, name = WatchtowerOptions.read(watchtower), _labels(production), _name(production)
    left_alone = (
        f"production is labelled {EXCLUDE}"
        if labels.get(ENABLE, "").lower() == "false"
        else f"production is labelled {MONITOR_ONLY}=true (it only notifies)"
        if _true(labels.get(MONITOR_ONLY))
        else f"it runs with --label-enable and production is not labelled {ENABLE}=true"
        if o.label_enable and not _true(labels.get(ENABLE))
        else "it runs with --monitor-only (it only notifies)"
        if o.monitor_only
        else "it runs with --no-restart (it never stops or starts containers)"
        if o.no_restart
        else f"--disable-containers names {name}"
        if name in o.disabled
        else f"it is limited to {', '.join(o.names)}"
        if o.names and name not in o.names
        else f"its scope {o.scope} is not production's ({labels.get(SCOPE) or 'none'})"
        if o.scope and labels.get(SCOPE) != o.scope
        else None
    )
    if left_alone is not None:
        return Watchtower(_name(watchtower), False, False, f"leaves production alone: {left_alone}")
    revives = o.include_stopped and o.revive_stopped
    how = (
        "with --include-stopped --revive-stopped it starts production while a run holds it stopped, "
        "beside the engine"
        if revives
        else "it skips a stopped production, but one it stopped to update as a run began is started "
        "again beside the engine"
    )
    return Watchtower(
        _name(watchtower),
        True,
        revives,
        f"stops, replaces and starts production {name} on a new image; {how}",
    )


@dataclass(frozen=True)
class Restarters:
    """What besides a run can start or replace production's container."""

    container: str
    policy: str  # ``always``, ``no``
    compose: ComposeService | None
    watchtowers: tuple[Watchtower, ...]


def survey(client: Any, container: str) -> Restarters:
    """Production's container and every running container, inspected (docker-py's client)."""
    production = client.api.inspect_container(container)
    running = [c.attrs for c in client.containers.list()]
    found = tuple(
        judge(c, production) for c in running if c.get("Id") != production.get("Id") and is_watchtower(c)
    )
    return Restarters(container, restart_policy(production), compose_service(production), found)
