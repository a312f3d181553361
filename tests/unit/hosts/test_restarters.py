"""Who besides a run can start or replace production's container, read from ``docker inspect`` as
the doctor reads it: a watchtower container (recognised by its image's label or its name, its options
from arguments or ``WATCHTOWER_*`` variables) that would restart production is named with how to
exclude production; one that leaves it alone says why; a compose project and the policy are said."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from strix_pipeline.config import DockerHostConfig, ProductionEngine
from strix_pipeline.doctor.restarters import restarter_checks
from strix_pipeline.hosts.box import restarters
from strix_pipeline.hosts.box.restarters import EXCLUDE, WatchtowerOptions, is_watchtower, judge

PROD = "llama-prod"


def inspect(
    name: str,
    image: str = "ghcr.io/ggml-org/llama.cpp:server-vulkan",
    *,
    labels: dict[str, str] | None = None,
    cmd: list[str] | None = None,
    env: list[str] | None = None,
    policy: str = "always",
) -> dict[str, Any]:
    """A container as ``docker inspect`` gives it (the fields read here)."""
    return {
        "Id": f"{name}-id",
        "Name": f"/{name}",
        "Config": {"Image": image, "Labels": labels or {}, "Cmd": cmd, "Env": env or ["PATH=/bin"]},
        "HostConfig": {"RestartPolicy": {"Name": policy, "MaximumRetryCount": 0}},
    }


def watchtower(**kw: Any) -> dict[str, Any]:
    kw.setdefault("labels", {"com.centurylinklabs.watchtower": "true"})
    return inspect("watchtower", "containrrr/watchtower:1.7.1", policy="unless-stopped", **kw)


def test_watchtower_is_recognised_by_its_label_or_its_image() -> None:
    assert is_watchtower(watchtower())
    assert is_watchtower(inspect("wt", "nickfedor/watchtower@sha256:" + "a" * 64))
    assert is_watchtower(inspect("wt", "127.0.0.1:5000/mirror/watchtower:latest"))
    assert not is_watchtower(inspect(PROD))
    assert not is_watchtower(inspect("x", "example/watchtower-exporter:1"))


def test_its_options_come_from_arguments_and_variables() -> None:
    o = WatchtowerOptions.read(
        watchtower(cmd=["--interval", "300", "-S", "--revive-stopped", "--scope=night", "nginx", "/redis"])
    )
    assert (o.include_stopped, o.revive_stopped, o.label_enable) == (True, True, False)
    assert o.scope == "night" and o.names == ("nginx", "redis")  # "300" is --interval's value, not a name
    o = WatchtowerOptions.read(
        watchtower(env=["WATCHTOWER_LABEL_ENABLE=true", f"WATCHTOWER_DISABLE_CONTAINERS=a {PROD},b"])
    )
    assert o.label_enable and o.disabled == ("a", PROD, "b") and o.names == ()
    assert not WatchtowerOptions.read(watchtower(cmd=["--label-enable=false"])).label_enable


def test_a_watchtower_that_revives_stopped_containers_restarts_production_mid_run() -> None:
    w = judge(watchtower(cmd=["--include-stopped", "--revive-stopped"]), inspect(PROD))
    assert (w.watches, w.revives) == (True, True)
    assert (
        f"stops, replaces and starts production {PROD}" in w.why and "while a run holds it stopped" in w.why
    )
    plain = judge(watchtower(), inspect(PROD))
    assert (plain.watches, plain.revives) == (True, False)


@pytest.mark.parametrize(
    ("tower", "labels", "why"),
    [
        ({}, {"com.centurylinklabs.watchtower.enable": "false"}, f"production is labelled {EXCLUDE}"),
        ({}, {"com.centurylinklabs.watchtower.monitor-only": "true"}, "it only notifies"),
        ({"cmd": ["--label-enable"]}, {}, "--label-enable and production is not labelled"),
        ({"env": ["WATCHTOWER_MONITOR_ONLY=1"]}, {}, "--monitor-only"),
        ({"cmd": ["--no-restart"]}, {}, "--no-restart"),
        ({"cmd": ["-x", f"{PROD},other"]}, {}, f"--disable-containers names {PROD}"),
        ({"cmd": ["nginx", "redis"]}, {}, "it is limited to nginx, redis"),
        ({"env": ["WATCHTOWER_SCOPE=web"]}, {}, "its scope web is not production's (none)"),
    ],
)
def test_a_watchtower_that_leaves_production_alone_says_why(tower, labels, why) -> None:
    w = judge(
        watchtower(**tower, **({} if "cmd" in tower else {"cmd": ["--revive-stopped", "-S"]})),
        inspect(PROD, labels=labels),
    )
    assert (w.watches, w.revives) == (False, False) and why in w.why, w.why


def test_watched_when_it_names_production_or_shares_its_scope_or_production_opts_in() -> None:
    scope = {"com.centurylinklabs.watchtower.scope": "web"}
    assert judge(watchtower(cmd=[PROD]), inspect(PROD)).watches
    assert judge(watchtower(cmd=["--scope", "web"]), inspect(PROD, labels=scope)).watches
    opted_in = {"com.centurylinklabs.watchtower.enable": "true"}
    assert judge(watchtower(cmd=["--label-enable"]), inspect(PROD, labels=opted_in)).watches


@dataclass
class FakeContainer:
    attrs: dict[str, Any]


@dataclass
class FakeApi:
    items: dict[str, dict[str, Any]]

    def inspect_container(self, name: str) -> dict[str, Any]:
        return self.items[name]


@dataclass
class FakeContainers:
    running: list[dict[str, Any]]

    def list(self) -> list[FakeContainer]:
        return [FakeContainer(a) for a in self.running]


@dataclass
class FakeClient:
    running: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.api = FakeApi({a["Name"].lstrip("/"): a for a in self.running})
        self.containers = FakeContainers(self.running)


def box(container: str | None = PROD) -> DockerHostConfig:
    production = (
        ProductionEngine(container=container, health_url="http://127.0.0.1:9/health") if container else None
    )
    return DockerHostConfig(kind="docker", docker_host="ssh://box", production=production)


def test_the_doctor_names_a_watchtower_that_would_restart_production_and_how_to_exclude_it() -> None:
    compose = {
        "com.docker.compose.project": "llm",
        "com.docker.compose.service": "llama",
        "com.docker.compose.project.config_files": "/srv/llm/compose.yaml",
    }
    client = FakeClient(
        [
            inspect(PROD, labels=compose),
            watchtower(env=["WATCHTOWER_INCLUDE_STOPPED=true", "WATCHTOWER_REVIVE_STOPPED=true"]),
        ]
    )
    checks = {c.name: c for c in restarter_checks("box", box(), client)}
    assert set(checks) == {"production restart policy", "production compose project", "watchtower watchtower"}
    policy = checks["production restart policy"]
    assert policy.ok and policy.detail.startswith("always: suspended for each run")
    c = checks["production compose project"]
    assert c.ok and "service llama of compose project llm (/srv/llm/compose.yaml)" in c.detail
    assert "docker compose -p llm up" in (c.fix or "")
    w = checks["watchtower watchtower"]
    assert not w.ok and w.required and "it can restart production mid-run" in w.detail
    assert EXCLUDE in (w.fix or "") and "--label-enable" in (w.fix or "")


def test_the_doctor_says_an_excluded_watchtower_and_no_watchtower_as_ok() -> None:
    excluded = inspect(PROD, labels={"com.centurylinklabs.watchtower.enable": "false"}, policy="no")
    checks = list(restarter_checks("box", box(), FakeClient([excluded, watchtower()])))
    assert [(c.name, c.ok, c.required) for c in checks] == [
        ("production restart policy", True, False),
        ("watchtower watchtower", True, False),
    ]
    assert checks[0].detail.startswith("none") and "leaves production alone" in checks[1].detail
    (policy, none) = restarter_checks("box", box(), FakeClient([inspect(PROD)]))
    assert none.name == "watchtower" and none.ok and none.detail == "no watchtower container running"
    assert list(restarter_checks("box", box(None), FakeClient())) == []


def test_a_production_not_found_is_said_not_raised() -> None:
    (c,) = restarter_checks("box", box(), FakeClient([]))
    assert not c.ok and not c.required and c.detail.startswith("not read: KeyError")
    assert restarters.restart_policy(inspect(PROD, policy="on-failure")) == "on-failure"
