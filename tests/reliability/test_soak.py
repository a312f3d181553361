"""Soak: the local pipeline's benchmark 20 times in a row leaks nothing and loses nothing.

Each iteration is what benchmark_run does for one target on `local`: run_benchmark (a real llama-server
started and stopped, a tiny profile: the smoke request and one level of two requests) and the run's store into
one warehouse file (spool.store_run: spooled, then loaded), all in a fresh Python process the test starts
(this file run as a script), so that nothing of the test session is counted. After the first five iterations
(warm-up: imports, caches, the warehouse's first opens) the open file descriptors, Python threads and child
processes of that process are the baseline; after the last they must be the same (OS threads: at most one
more, a native pool's lazily started worker), and the warehouse must hold exactly 20 runs with the planned
rows each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

if __name__ == "__main__":  # run as the soak's own process: the tests' helpers, as pytest finds them
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest
from conftest import need
from support.pipeline_helpers import edit_config, llama_available, write_config
from support.procfs import descendants, proc_stats

from strix_pipeline.config_load import load_config
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.warehouse import Warehouse, spool

pytestmark = [pytest.mark.llama, pytest.mark.slow]

ITERATIONS = 20
# a run's last threads (the memory sampler, aiohttp's resolver, DuckDB's) may still be ending when it
# returns: a leak is what is still there after this
SETTLE_S = 10.0
WARM_UP = 5  # runs before the baseline: imports, caches, the warehouse's first opens, pools started
POOL_SLACK = 1  # a native pool's worker started later than the warm-up (see the test)
TIME_BUDGET_S = 600  # a bound, not the expectation (~2-3 min on two busy cores)
SOAK_PROFILE = (
    ("levels = [1, 2]\nrequests_per_level = 2\n", "levels = [1]\nrequests_per_level = 2\n"),
    ("output_tokens = 8\njson_check = false", "output_tokens = 4\njson_check = false"),
)


def open_fds() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the directory's own descriptor, closed by now
            pass
    return sorted(out)


def os_threads() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads: line in /proc/self/status")


def os_thread_names() -> list[str]:
    """Every OS thread's name (Python's, DuckDB's, Arrow's, ...): what a count difference is made of."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # ended meanwhile
            pass
    return sorted(names)


def children() -> list[str]:
    """This process's descendants (pid and command), from /proc."""
    me = os.getpid()
    stats = proc_stats()
    return sorted(f"{p} {stats[p][1]}" for p in descendants(me, stats))


def figures() -> dict[str, object]:
    return {
        "fds": open_fds(),
        "python_threads": sorted(t.name for t in threading.enumerate()),
        "os_threads": os_threads(),
        "os_thread_names": os_thread_names(),
        "children": children(),
    }


def settled(target: dict[str, object] | None = None, timeout_s: float = SETTLE_S) -> dict[str, object]:
    """The figures once threads that are ending have ended: equal to ``target`` (or, without one,
    the same for 1 s). Bounded: after ``timeout_s`` the last figures are returned as they are, so a
    thread or descriptor that stays is still a failure."""
    deadline = time.monotonic() + timeout_s
    last, same_since = figures(), time.monotonic()
    while time.monotonic() < deadline:
        if target is not None and last == target:
            return last
        if target is None and time.monotonic() - same_since >= 1.0:
            return last
        time.sleep(0.1)
        now = figures()
        if now != last:
            last, same_since = now, time.monotonic()
    return last


def soak(config_path: Path) -> dict[str, object]:
    """The 20 iterations, in a process of their own (see the test): what it measured, as JSON."""
    config = load_config(config_path)
    target = BenchmarkTarget("local", "llamacpp", "gemma3-270m", "tiny", None)
    db = config.warehouse_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    spool_directory = spool.spool_dir(config.artifacts_dir())
    started = time.monotonic()
    durations: list[float] = []
    threads_after: list[int] = []  # right after each run, before anything has had time to end
    baseline: dict[str, object] | None = None
    for i in range(ITERATIONS):
        assert time.monotonic() - started < TIME_BUDGET_S, f"soak over its {TIME_BUDGET_S} s bound at {i}"
        t0 = time.monotonic()
        result = run_benchmark(config, target, run_id=f"soak-{i:02d}", log=lambda _line: None)
        stored = spool.store_run(
            result,
            spool_directory=spool_directory,
            open_writer=lambda: Warehouse.open(db),
            warehouse_path=db,
            host=spool.HostFacts("local", "local", "soak"),
        )
        assert stored.notes() == [], stored.notes()
        durations.append(time.monotonic() - t0)
        threads_after.append(os_threads())
        assert result.run.status == "ok", (i, result.run.failure_reason, result.run.log_tail)
        if i == WARM_UP - 1:
            baseline = settled()
    assert baseline is not None
    return {
        "baseline": baseline,
        "end": settled(baseline),
        "durations": durations,
        "threads_after": threads_after,
        "total_s": time.monotonic() - started,
        "pending_spool": [str(p) for p in spool.pending(spool_directory)],
    }


def test_twenty_local_runs_leak_nothing_and_store_exactly_what_was_planned(tmp_path: Path) -> None:
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    path = edit_config(write_config(tmp_path), *SOAK_PROFILE)
    config = load_config(path)
    profile = config.profiles["tiny"]
    planned_requests = profile.smoke.requests + sum(
        profile.concurrency_sweep.requests_for(level) for level in profile.concurrency_sweep.levels
    )
    planned_levels = 1 + len(profile.concurrency_sweep.levels)  # the smoke's aggregate and each level's
    assert (planned_requests, planned_levels) == (3, 2)
    db = config.warehouse_path()

    # In a process of its own: the test session's other threads (fixtures' engines, Dagster's and
    # docker-py's pools, earlier tests' stragglers) come and go on their own schedule and are not
    # the pipeline's; in a fresh process every thread, descriptor and child is the loop's.
    proc = subprocess.run(
        [sys.executable, __file__, str(path)],
        capture_output=True,
        text=True,
        timeout=TIME_BUDGET_S + 120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    baseline, end, durations = got["baseline"], got["end"], got["durations"]
    print(
        f"\nsoak: {ITERATIONS} runs in {got['total_s']:.1f} s (first {durations[0]:.1f} s, median "
        f"{sorted(durations)[len(durations) // 2]:.1f} s, max {max(durations):.1f} s)\n"
        f"after run {WARM_UP}: {len(baseline['fds'])} fds, {baseline['os_threads']} threads "
        f"({len(baseline['python_threads'])} Python), {len(baseline['children'])} children\n"
        f"after run {ITERATIONS}: {len(end['fds'])} fds, {end['os_threads']} threads "
        f"({len(end['python_threads'])} Python), {len(end['children'])} children\n"
        f"OS threads right after each run: {got['threads_after']}"
    )
    assert end["fds"] == baseline["fds"]
    assert end["python_threads"] == baseline["python_threads"]
    # Native worker pools (Arrow's and DuckDB's, whose threads inherit the name "python"; uvloop's
    # libuv workers) start a worker on demand up to a fixed size, so one more may have started since
    # the warm-up; a leak grows with every run (15 more runs after the baseline). Python's own
    # threads, the descriptors and the children must be exactly the same.
    assert end["os_threads"] <= baseline["os_threads"] + POOL_SLACK, (
        got["threads_after"],
        baseline["os_thread_names"],
        end["os_thread_names"],
    )
    assert end["children"] == baseline["children"] == []
    assert got["pending_spool"] == []  # every spool file was loaded, then removed

    with Warehouse.open(db, read_only=True) as wh:
        counts = {t: wh.count(t) for t in ("runs", "requests", "aggregates")}
        per_run = wh.query_df(
            "SELECT r.run_id, r.status, "
            "(SELECT count(*) FROM requests q WHERE q.run_id = r.run_id) AS requests, "
            "(SELECT count(*) FROM requests q WHERE q.run_id = r.run_id AND q.ok) AS ok, "
            "(SELECT count(*) FROM aggregates a WHERE a.run_id = r.run_id) AS aggregates, "
            "(SELECT count(*) FROM memory_samples m WHERE m.run_id = r.run_id) AS memory "
            "FROM runs r ORDER BY r.run_id"
        ).to_dicts()
        hosts = wh.count("hosts")
    print(f"warehouse: {counts}, hosts {hosts}")
    assert counts == {
        "runs": ITERATIONS,
        "requests": ITERATIONS * planned_requests,
        "aggregates": ITERATIONS * planned_levels,
    }
    assert hosts == 1
    assert [r["run_id"] for r in per_run] == [f"soak-{i:02d}" for i in range(ITERATIONS)]
    for r in per_run:
        assert (r["status"], r["requests"], r["ok"], r["aggregates"]) == (
            "ok",
            planned_requests,
            planned_requests,
            planned_levels,
        ), r
        assert r["memory"] > 0, r


if __name__ == "__main__":  # the soak's own process (the test above starts it)
    print(json.dumps(soak(Path(sys.argv[1]))))
