"""The lock pins every dependency pyproject.toml declares, at a version its range admits."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support.paths import REPO as REPO_ROOT


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"requirements.lock: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version
    return pins


def test_every_declared_dependency_is_pinned_inside_its_range() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in ("local", "dev"):
        declared += project["optional-dependencies"][extra]
    pins = _pins()
    for spec in declared:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is declared in pyproject.toml but not pinned in requirements.lock"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}"
        )


def test_the_running_environment_is_the_locked_one() -> None:
    from importlib import metadata

    pins = _pins()
    for name in ("aiohttp", "duckdb", "dagster", "httpx", "croniter"):
        assert metadata.version(name) == pins[name], name
