"""Shared test helpers: real services are required in CI and skipped locally with a hint."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, what: str, how: str) -> None:
    """Fail in CI, skip locally: a CI run that silently skips its integration tests proves nothing."""
    if condition:
        return
    message = f"{what} is not available ({how})"
    if IN_CI:
        pytest.fail(message + " -- required when CI=true")
    pytest.skip(message)


def docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def docker_engine() -> None:
    need(
        docker_available(),
        "a Docker engine",
        "apt-get install docker.io; dockerd --iptables=false --bridge=none &",
    )


@pytest.fixture(scope="session")
def registry_binary() -> str:
    path = shutil.which("docker-registry") or ("/usr/bin/docker-registry" if os.path.exists("/usr/bin/docker-registry") else None)
    need(path is not None, "the docker-registry binary", "apt-get install docker-registry")
    return path  # type: ignore[return-value]
