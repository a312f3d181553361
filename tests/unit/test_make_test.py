"""`make test` runs every test in one pytest on two worker processes, the tests that share a worker
grouped (--dist loadgroup), and exits with pytest's code; PYTEST_ARGS reaches it, and PYTEST_ARGS
naming tests runs exactly those in one pytest.

Shown on the real Makefile with the real make, its python a script that records each pytest command
and answers with the exit code the test chose for it (provisioning is left out with -o)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import need
from support.paths import REPO

# a stand-in for the venv's python: "-m pytest ARGS" recorded one line each, then the part's exit code
FAKE_PYTHON = f"""#!{sys.executable}
import os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if "tests/unit" in args:
    sys.exit(int(os.environ.get("FAKE_RC_ALL", "0")))
sys.exit(int(os.environ.get("FAKE_RC_OTHER", "0")))
"""


def _make_test(tmp_path: Path, *make_args: str, **rcs: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    need(shutil.which("make") is not None, "make", "apt-get install make")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "pytest-commands"
    log.write_text("")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTEST_ARGS", "TEST_REPORTS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    }
    env.update({"FAKE_LOG": str(log), **{f"FAKE_RC_{k.upper()}": str(v) for k, v in rcs.items()}})
    run = subprocess.run(
        ["make", "-s", "-C", str(REPO), "-o", "provision", "test", f"BIN={bin_dir}", *make_args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return run, log.read_text().splitlines()


def test_every_test_runs_in_one_pytest_on_two_workers_in_groups(tmp_path: Path) -> None:
    run, commands = _make_test(tmp_path, "PYTEST_ARGS=-ra --durations=25")
    assert run.returncode == 0, run.stdout + run.stderr
    # loadgroup: the tests sharing the Docker daemon stay on one worker (support/workers.py)
    assert commands == [
        "-m pytest -n 2 --dist loadgroup tests/integration tests/reliability tests/unit -ra --durations=25"
    ], commands
    # the line .ci/run reads into its table of time per phase
    lines = [line for line in run.stdout.splitlines() if line.startswith("test: ")]
    assert [line.rsplit(" in ", 1)[0] for line in lines] == ["test: all tests on 2 workers: exit 0"], (
        run.stdout
    )
    assert lines[0].endswith(" s") and lines[0].rsplit(" ", 2)[1].isdigit(), run.stdout


def test_a_failing_pytest_fails_the_target(tmp_path: Path) -> None:
    for rc in (1, 2, 5):  # 5: nothing collected, a failure too
        run, commands = _make_test(tmp_path, all=rc)
        assert run.returncode != 0, (rc, run.stdout)
        assert len(commands) == 1, (rc, commands)
        assert f"test: all tests on 2 workers: exit {rc} in" in run.stdout, run.stdout


def test_pytest_args_naming_tests_run_exactly_those_in_one_pytest(tmp_path: Path) -> None:
    for args in ("tests/unit/test_lock.py -x", "-x tests/integration/docker", "tests"):
        run, commands = _make_test(tmp_path, f"PYTEST_ARGS={args}", other=3)
        assert commands == [f"-m pytest {args}"], (args, commands)
        assert run.returncode != 0, run.stdout  # its exit code is the target's


def test_ci_keeps_the_junit_report(tmp_path: Path) -> None:
    run, commands = _make_test(tmp_path, f"TEST_REPORTS={tmp_path}")
    assert len(commands) == 1, commands
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"--junitxml={tmp_path}/tests.xml" in commands[0].split(), commands
    run, commands = _make_test(tmp_path, "PYTEST_ARGS=tests/unit/test_lock.py", f"TEST_REPORTS={tmp_path}")
    assert commands == [f"-m pytest --junitxml={tmp_path}/selected.xml tests/unit/test_lock.py"], commands
