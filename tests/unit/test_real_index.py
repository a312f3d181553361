"""A build in a pytest-xdist worker reads the index pip really installs from, not the session's: the
worker starts with the environment its controller's session had already changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# the controller: reads the user's index, then replaces it for its tests, then starts a "worker"
CONTROLLER = textwrap.dedent(
    """
    import os, subprocess, sys
    from support.package_index import INDEX_ENV, real_index
    assert real_index() == "https://mirror.example/simple", real_index()
    os.environ[INDEX_ENV] = "file:///tmp/the-sessions-index"
    worker = "from support.package_index import real_index; print(real_index())"
    print(subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True).stdout.strip())
    """
)


def _controller(index: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_INDEX_URL", "STRIX_TEST_REAL"))}
    env |= {"PYTHONPATH": str(TESTS), "PIP_INDEX_URL": index}
    run = subprocess.run(
        [sys.executable, "-c", CONTROLLER], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_a_worker_reads_the_users_index_not_the_sessions() -> None:
    assert _controller("https://mirror.example/simple") == "https://mirror.example/simple"
