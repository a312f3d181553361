"""Done when: a test proves two runs in the same host pool never overlap (timestamps from both).

Two Dagster runs of `benchmark_run` for the `local` host are started at once, each in its own process (as the
run launcher does), against one instance configured with the `concurrency` section of the project's
dagster.yaml (the one `make ui`/`make run` use). The engine itself is replaced by a stand-in that records when
it held the host and holds it for a while; everything else -- the asset, its pool, the executor, the
instance's slot accounting, the warehouse load -- is the real thing. The in-process executor honours op pools
(dagster/_core/executor/in_process.py enters an InstanceConcurrencyContext), as the multiprocess executor the
daemon's runs use does.

A control shows the stand-in *can* overlap when nothing limits the pool, so the first test's result
comes from the pool, not from the test harness serialising the runs.

The second run starts STAGGER_S after the first. Started at the same instant, the two step-slot
claims can both succeed: Dagster's claim (dagster/_core/storage/event_log/sql_event_log.py,
has_unassigned_slots, add_pending_step, then a SELECT ... FOR UPDATE that no transaction holds) is a
check followed by a write, and two claims inside that window of a few milliseconds were both granted
here (2 of 5 repetitions on these two loaded cores; the same code on SQLite and PostgreSQL). Runs the
daemon launches are also held back by the run queue's one-run-per-host limit (strix/host), which one
daemon decides alone; tests/integration/postgres/test_dagster_postgres.py shows it across processes.

Two threads of one process cannot stand in for two runs: Dagster's in-process execution reconfigures
Python logging per run, and two runs doing so at once deadlock on the logging locks (seen here with
1.13.28), so each run gets a forked process, as real runs get their own process.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from pathlib import Path

import dagster as dg
import yaml
from dagster._core.storage.defs_state import base as defs_state_base
from support.engine_standin import EngineStandIn
from support.engine_standin import intervals as standin_intervals
from support.paths import REPO
from support.pipeline_helpers import local_partition

from assets.partitions import image_versions
from strix_dagster.definitions import build_definitions
from strix_pipeline.config_load import load_config

HOLD_S = 1.5
STAGGER_S = 0.5  # see the module docstring: not an instant apart, where Dagster's claim races


def project_concurrency() -> dict:
    """The `concurrency` section of the project's dagster.yaml."""
    settings = yaml.safe_load((REPO / "strix_dagster" / "dagster.yaml").read_text())
    return {"concurrency": settings["concurrency"]}


def _one_run(
    instance_ref, config_path: str, key: str, out: str, rendezvous: bool, go, delay_s: float
) -> None:
    """One Dagster run of benchmark_job in this (forked) process, ``delay_s`` after the other's start.
    An exception is written to ``out`` for the parent's assertion: a forked child's stderr is lost."""
    import assets.benchmark as bench_mod

    try:
        # a fork inherits the parent's current defs-state storage (a ContextVar): this run's own
        # instance publishes its own, as a run worker's process does
        defs_state_base._current_storage.set(None)
        bench_mod.run_benchmark = EngineStandIn(Path(out), HOLD_S, rendezvous=2 if rendezvous else 0)
        with dg.DagsterInstance.from_ref(instance_ref) as instance:
            job = build_definitions(load_config(config_path), config_path).resolve_job_def("benchmark_job")
            go.wait(timeout=60)
            time.sleep(delay_s)
            result = job.execute_in_process(instance=instance, partition_key=key, raise_on_error=False)
        (Path(out) / f"result-{result.run_id}").write_text("success" if result.success else "failure")
    except BaseException:
        (Path(out) / f"error-{os.getpid()}").write_text(traceback.format_exc())
        raise


def _run_two_at_once(tmp_path: Path, overrides: dict, rendezvous: bool = False):
    """Two runs of the local partition started together: (intervals by run id, pool limits, runs that
    waited)."""
    seeded = local_partition(tmp_path)
    path, key, out = seeded.config_path, seeded.key, seeded.out
    ctx = multiprocessing.get_context("fork")
    with dg.instance_for_test(overrides=overrides) as instance:
        instance.add_dynamic_partitions(image_versions.name, [key])
        limit = overrides.get("concurrency", {}).get("pools", {}).get("default_limit")
        if limit is not None:
            # Dagster creates a pool's slots lazily on the first claim; two runs claiming within the
            # same millisecond (the barrier below) can both pass before the row exists. A deployed
            # instance has the row from its first run on, so start from that state.
            instance.event_log_storage.set_concurrency_slots("host_local", limit)
        go = ctx.Barrier(2)
        procs = [
            ctx.Process(
                target=_one_run,
                args=(instance.get_ref(), str(path), key, str(out), rendezvous, go, i * STAGGER_S),
            )
            for i in range(2)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=240)
        for p in procs:
            if p.is_alive():
                p.kill()
        errors = "\n".join(f.read_text() for f in out.glob("error-*"))
        assert [p.exitcode for p in procs] == [0, 0], errors
        results = {f.name.removeprefix("result-"): f.read_text() for f in out.glob("result-*")}
        assert list(results.values()) == ["success", "success"], results
        intervals = standin_intervals(out)
        assert set(intervals) == set(results)
        # Both runs are in the instance, each with its benchmark_run step done.
        for run_id in results:
            assert instance.get_run_by_id(run_id).is_success
        limits = {p.name: p.limit for p in instance.event_log_storage.get_pool_limits()}
        blocked = [
            run_id
            for run_id in results
            if any(
                "blocked by limit for pool host_local" in (e.message or "") for e in instance.all_logs(run_id)
            )
        ]
        return intervals, limits, blocked


def test_same_host_pool_never_overlaps(tmp_path: Path) -> None:
    overrides = project_concurrency()
    assert overrides["concurrency"]["pools"]["default_limit"] == 1
    assert overrides["concurrency"]["pools"].get("granularity", "op") == "op"
    intervals, limits, blocked = _run_two_at_once(tmp_path, overrides)
    (s1, e1), (s2, e2) = sorted(intervals.values())
    print(f"run A held host_local {0:.2f}-{e1 - s1:.2f} s, run B {s2 - s1:.2f}-{e2 - s1:.2f} s")
    assert e1 <= s2, f"runs overlapped: [{s1:.3f}, {e1:.3f}] and [{s2:.3f}, {e2:.3f}]"
    assert limits.get("host_local") == 1  # the pool got the project's default limit
    assert len(blocked) == 1, blocked  # the later run waited for the slot (the UI shows this event)


def test_control_without_a_pool_limit_runs_overlap(tmp_path: Path) -> None:
    """Without the limit the same two runs hold the host at the same time: the test above can fail."""
    intervals, limits, blocked = _run_two_at_once(tmp_path, {}, rendezvous=True)
    assert "host_local" not in limits and not blocked
    (s1, e1), (s2, e2) = sorted(intervals.values())
    print(f"no limit: run A {0:.2f}-{e1 - s1:.2f} s, run B {s2 - s1:.2f}-{e2 - s1:.2f} s")
    assert s2 < e1, "without a pool limit the runs were expected to overlap"
