"""`make test` runs the unit tests on two worker processes, then the integration and reliability tests in
one process; both parts run even when the first fails, and the target fails when either does.
PYTEST_ARGS reaches both parts, and PYTEST_ARGS naming tests runs exactly those in one pytest.

Shown on the real Makefile with the real make, its python a script that records each pytest command
and answers with the exit code the test chose for that part (provisioning is left out with -o)."""

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
    sys.exit(int(os.environ.get("FAKE_RC_UNIT", "0")))
if "tests/integration" in args:
    sys.exit(int(os.environ.get("FAKE_RC_SERIAL", "0")))
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


def test_the_unit_tests_run_on_two_workers_then_the_rest_in_one_process(tmp_path: Path) -> None:
    run, commands = _make_test(tmp_path, "PYTEST_ARGS=-ra --durations=25")
    assert run.returncode == 0, run.stdout + run.stderr
    unit, serial = commands
    assert unit.startswith("-m pytest -n 2 --dist ") and unit.endswith(" tests/unit -ra --durations=25"), unit
    assert serial == "-m pytest tests/integration tests/reliability -ra --durations=25", serial
    # one line per part, in the form .ci/run reads into its table of time per phase
    lines = [line for line in run.stdout.splitlines() if line.startswith("test: ")]
    assert [line.rsplit(" in ", 1)[0] for line in lines] == [
        "test: unit tests on 2 workers: exit 0",
        "test: integration and reliability tests in one process: exit 0",
    ], run.stdout
    assert all(line.endswith(" s") and line.rsplit(" ", 2)[1].isdigit() for line in lines), run.stdout


def test_a_failing_part_fails_the_target_after_both_ran(tmp_path: Path) -> None:
    for rc_unit, rc_serial in ((1, 0), (0, 1), (2, 1), (1, 5), (5, 1)):
        run, commands = _make_test(tmp_path, unit=rc_unit, serial=rc_serial)
        assert run.returncode != 0, (rc_unit, rc_serial, run.stdout)
        assert len(commands) == 2, (rc_unit, rc_serial, commands)
        assert f"test: unit tests on 2 workers: exit {rc_unit} in" in run.stdout, run.stdout


def test_an_empty_part_passes_only_beside_a_part_that_ran_tests(tmp_path: Path) -> None:
    # `-k` or `-m` selecting tests of one part only: the other part's pytest exits 5 (no tests ran)
    for rc_unit, rc_serial in ((5, 0), (0, 5)):
        run, _ = _make_test(tmp_path, "PYTEST_ARGS=-k warehouse", unit=rc_unit, serial=rc_serial)
        assert run.returncode == 0, (rc_unit, rc_serial, run.stdout + run.stderr)
    run, _ = _make_test(tmp_path, "PYTEST_ARGS=-k nothing", unit=5, serial=5)
    assert run.returncode != 0, run.stdout


def test_pytest_args_naming_tests_run_exactly_those_in_one_pytest(tmp_path: Path) -> None:
    for args in ("tests/unit/test_lock.py -x", "-x tests/integration/docker", "tests"):
        run, commands = _make_test(tmp_path, f"PYTEST_ARGS={args}", other=3)
        assert commands == [f"-m pytest {args}"], (args, commands)
        assert run.returncode != 0, run.stdout  # its exit code is the target's


def test_ci_keeps_each_parts_junit_report(tmp_path: Path) -> None:
    run, commands = _make_test(tmp_path, f"TEST_REPORTS={tmp_path}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"--junitxml={tmp_path}/unit.xml" in commands[0].split(), commands
    assert f"--junitxml={tmp_path}/serial.xml" in commands[1].split(), commands
    run, commands = _make_test(tmp_path, "PYTEST_ARGS=tests/unit/test_lock.py", f"TEST_REPORTS={tmp_path}")
    assert commands == [f"-m pytest --junitxml={tmp_path}/selected.xml tests/unit/test_lock.py"], commands
