"""A run cancelled in the middle of a benchmark is stopped cleanly and recorded as `cancelled`.

Local host: a real Dagster run launched by the instance's default run launcher (a gRPC code server,
its run worker process, the multiprocess executor's step process, a real llama-server) and
terminated with ``instance.run_launcher.terminate`` -- what the UI's "Terminate" calls -- once the
event log shows the sweep's second level begun. Docker host with a production container: run_benchmark
in a child process of the test, SIGINT to it mid-sweep (a full Dagster run over Docker costs minutes
more on two cores and adds nothing the local test does not show about Dagster's side).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path

import dagster as dg
import pytest
from conftest import need
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import ModuleTarget
from support.bench_docker import container_state, healthy, make_config, managed, target
from support.llama_image import LlamaImage
from support.paths import REPO
from support.pipeline_helpers import edit_config, llama_available, wait_for, write_config
from support.sigint import default_sigint

from assets.partitions import image_versions
from strix_dagster.definitions import build_definitions
from strix_pipeline import image_scan
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.warehouse import Warehouse

pytestmark = [pytest.mark.llama, pytest.mark.slow]

# smoke, level 1 (2 requests), then level 2 planned at 200 requests: the cancel lands there
LONG_SWEEP = ("requests_per_level = 2\n", "requests_per_level = 2\nrequests_at = { 2 = 200 }\n")
# logged as level 2 begins, before its first request (benchmark.level_started): a cancel sent on it
# lands in level 2 (200 requests: minutes), not between levels -- CI once saw a cancel sent on level
# 1's summary line land before level 2 had begun
LEVEL_2_BEGUN = "concurrency_sweep level 2: 200 request(s)"


def long_config(tmp_path: Path) -> Path:
    return edit_config(write_config(tmp_path), LONG_SWEEP)


def listening(port: int) -> bool:
    """Anything listening on ``port`` (IPv4 or IPv6), from the kernel's tables."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                return True
    return False


def assert_port_free(port: int) -> None:
    """Nothing listens on ``port`` and a server can take it again (SO_REUSEADDR, as servers bind: the
    cancelled requests' connections may sit in TIME_WAIT)."""
    assert not listening(port), f"something still listens on port {port}"
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def processes_with(*needles: str) -> list[int]:
    """Pids whose command line contains every needle."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if all(n in cmd for n in needles):
            found.append(int(d.name))
    return found


def engine_port(launch_command: str) -> int:
    m = re.search(r"--port[ =](\d+)", launch_command)
    assert m, launch_command
    return int(m.group(1))


def _messages(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.user_message or "" for e in instance.all_logs(run_id)]


def assert_cut_level(aggregates: list[dict], level2_requests: int) -> None:
    """Level 2 (200 planned) was in flight: it is kept with the requests that had finished, and says so.
    How many finished depends on the machine's speed; that records and aggregate agree does not."""
    sweep = {a["level"]: a for a in aggregates if a["scenario"] == "concurrency_sweep"}
    assert sorted(sweep) == [1, 2], aggregates
    cut = sweep[2]
    assert cut["requests_planned"] == 200
    assert cut["requests_ok"] + cut["requests_failed"] == level2_requests
    assert cut["stopped_reason"] == f"stopped after {level2_requests}/200 requests: cancelled"
    assert sweep[1]["requests_ok"] == 2 and sweep[1]["stopped_reason"] is None


def test_terminated_dagster_run_is_recorded_cancelled_and_leaves_no_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    path = long_config(tmp_path)
    monkeypatch.setenv("STRIX_CONFIG", str(path))  # what the code server's `defs` load
    config = load_config(path)
    defs = build_definitions(config, str(path))
    key = partition_key("llamacpp", image_scan.local_image("llamacpp"))
    home = tmp_path / "dagster-home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        assert type(instance.run_launcher).__name__ == "DefaultRunLauncher"
        instance.add_dynamic_partitions(image_versions.name, [key])
        # the local build's image record, which benchmark_run looks its partition up in
        refresh = defs.resolve_job_def("refresh_images_job").execute_in_process(instance=instance)
        assert refresh.success
        target = ModuleTarget(
            module_name="strix_dagster.definitions",
            attribute="defs",
            working_directory=str(REPO),
            location_name="strix",
        )
        with WorkspaceProcessContext(instance, target) as process_context:
            workspace = process_context.create_request_context()
            location = workspace.get_code_location("strix")
            (repo,) = location.get_repositories().values()
            job = location.get_job(JobSubsetSelector("strix", repo.name, "benchmark_job", None, None, None))
            exec_plan = location.get_execution_plan(
                job, {}, step_keys_to_execute=None, known_state=None, instance=instance
            )
            run = instance.create_run(
                job_name=job.name,
                run_id=None,
                run_config={},
                resolved_op_selection=None,
                step_keys_to_execute=None,
                op_selection=None,
                status=None,
                root_run_id=None,
                parent_run_id=None,
                tags={**job.tags, "dagster/partition": key},
                job_snapshot=job.job_snapshot,
                execution_plan_snapshot=exec_plan.execution_plan_snapshot,
                parent_job_snapshot=job.parent_job_snapshot,
                remote_job_origin=job.get_remote_origin(),
                job_code_origin=job.get_python_origin(),
                asset_selection=None,
                asset_check_selection=None,
                asset_graph=repo.asset_graph,
            )
            started = time.monotonic()
            instance.launch_run(run.run_id, workspace)

            def level_2_begun() -> bool:
                status = instance.get_run_by_id(run.run_id).status
                assert status not in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.SUCCESS), (
                    status,
                    _messages(instance, run.run_id)[-20:],
                )
                return any(LEVEL_2_BEGUN in m for m in _messages(instance, run.run_id))

            wait_for("the sweep's level 2 in the event log", level_2_begun, 300)
            print(f"level 2 begun after {time.monotonic() - started:.1f} s; terminating")
            terminate_at = time.monotonic()
            assert instance.run_launcher.terminate(run.run_id)
            finished = wait_for(
                "the run to finish",
                lambda: (r := instance.get_run_by_id(run.run_id)).is_finished and r,
                120,
            )
            print(f"run {finished.status.value} {time.monotonic() - terminate_at:.1f} s after terminate")
            assert finished.status == dg.DagsterRunStatus.CANCELED, _messages(instance, run.run_id)[-20:]
            assert any("cancelled" in m for m in _messages(instance, run.run_id))

    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        (row,) = wh.query_df(
            "SELECT run_id, status, failure_reason, launch_command, memory_returned, dagster_run_id FROM runs"
        ).to_dicts()
        counts = wh.query_df(
            "SELECT scenario, level, count(*) AS n FROM requests GROUP BY ALL ORDER BY ALL"
        ).to_dicts()
        aggregates = wh.query_df(
            "SELECT scenario, level, requests_planned, requests_ok, requests_failed, stopped_reason "
            "FROM aggregates"
        ).to_dicts()
        after_stop = wh.query_df(
            "SELECT count(*) AS n FROM memory_samples WHERE phase = 'after_stop'"
        ).to_dicts()[0]["n"]
        usable = wh.query_df("SELECT usable FROM v_run_base").to_dicts()
    print(row["failure_reason"], counts)
    assert row["dagster_run_id"] == run.run_id
    assert row["status"] == "cancelled"
    # cancelled in the level in flight, with the interrupt's class named
    assert (
        "cancelled (DagsterExecutionInterruptedError) at concurrency_sweep level 2" in row["failure_reason"]
    )
    # the smoke request and the first level (2 requests) kept, and level 2's finished requests
    n = {(c["scenario"], c["level"]): c["n"] for c in counts}
    level2 = n.pop(("concurrency_sweep", 2), 0)
    assert n == {("smoke", 1): 1, ("concurrency_sweep", 1): 2}
    assert_cut_level(aggregates, level2)
    assert after_stop >= 1 and row["memory_returned"] is not None
    assert usable == [{"usable": False}]
    port = engine_port(row["launch_command"])
    assert processes_with("llama-server", f"--port {port}") == []
    assert_port_free(port)


def test_interrupt_outside_dagster_is_still_recorded(tmp_path: Path) -> None:
    """The domain alone (no Dagster): SIGINT with Python's default handler -> KeyboardInterrupt in the
    suite -> RunCancelled with the result; the engine is gone before it is raised."""
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    import threading

    from strix_pipeline.runner import BenchmarkTarget, RunCancelled, run_benchmark

    config = load_config(long_config(tmp_path))
    target = BenchmarkTarget("local", "llamacpp", "gemma3-270m", "tiny", None)
    lines: list[str] = []
    fired = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if LEVEL_2_BEGUN in line and not fired.is_set():
            fired.set()
            threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT)).start()

    # set here, not inherited: under `bash .ci/run &` pytest starts with SIGINT ignored
    with default_sigint(), pytest.raises(RunCancelled) as info:
        run_benchmark(config, target, log=log)
    result = info.value.result
    assert isinstance(info.value.interrupt, KeyboardInterrupt)
    assert result.run.status == "cancelled"
    assert "cancelled (KeyboardInterrupt) at concurrency_sweep level 2" in result.run.failure_reason
    levels = [q.level for q in result.requests if q.scenario == "concurrency_sweep"]
    assert levels.count(1) == 2
    assert_cut_level([vars(a) for a in result.aggregates], levels.count(2))
    assert result.run.memory_returned is not None
    assert any(m.phase == "after_stop" for m in result.memory)
    port = engine_port(result.run.launch_command)
    assert processes_with("llama-server", f"--port {port}") == []
    assert_port_free(port)


# ---------------------------------------------------------------- a Docker host with production


@pytest.mark.docker
@pytest.mark.registry
@pytest.mark.timeout(600)
def test_cancelled_docker_run_restores_production_and_is_recorded(
    llama: LlamaImage,  # tests/conftest.py: the llama-server image in a loopback registry
    model_path: Path,
    production: tuple[str, str],  # a busybox httpd container (name, /health URL), on host networking
    tmp_path: Path,
) -> None:
    """run_benchmark in this process's main thread under Dagster's own interrupt handling
    (``raise_execution_interrupts``: SIGINT raises DagsterExecutionInterruptedError, as in a step);
    SIGINT 2 s into the sweep's level 2. A whole Dagster run over Docker would add minutes on
    two cores and nothing the local test does not show about Dagster's side."""
    import threading

    from dagster._core.errors import DagsterExecutionInterruptedError, raise_execution_interrupts

    from strix_pipeline.runner import RunCancelled, run_benchmark

    name, url = production
    base = make_config(
        tmp_path, llama, model_path, production={"container": name, "health_url": url, "health_timeout_s": 30}
    )
    tiny = base.profiles["tiny"]
    sweep = tiny.concurrency_sweep.model_copy(update={"requests_at": {2: 200}})
    config = base.model_copy(
        update={"profiles": {"tiny": tiny.model_copy(update={"concurrency_sweep": sweep})}}
    )
    states: list[tuple[str, bool]] = []  # production's state when the cancel was sent
    fired = threading.Event()

    def cancel() -> None:
        states.append((container_state(name), healthy(url)))
        os.kill(os.getpid(), signal.SIGINT)

    def log(line: str) -> None:
        if LEVEL_2_BEGUN in line and not fired.is_set():
            fired.set()
            threading.Timer(2.0, cancel).start()

    run_id = "bd-cancel"
    with raise_execution_interrupts(), pytest.raises(RunCancelled) as info:
        run_benchmark(config, target(llama), run_id=run_id, log=log, force=True)
    assert states == [("exited", False)]  # production was down while the engine ran
    assert isinstance(info.value.interrupt, DagsterExecutionInterruptedError)
    result = info.value.result
    r = result.run
    assert r.status == "cancelled"
    assert "cancelled (DagsterExecutionInterruptedError) at concurrency_sweep level 2" in r.failure_reason
    # production is back before RunCancelled is raised, and the run says so
    assert container_state(name) == "running" and healthy(url)
    assert result.production_restored is True
    assert r.production_down_at and r.production_up_at and r.production_down_at < r.production_up_at
    assert managed(run_id) == []  # the engine's container is gone
    assert any(m.phase == "after_stop" for m in result.memory) and r.memory_returned is not None

    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.load_run(result)
    with Warehouse.open(tmp_path / "w.duckdb", read_only=True) as wh:
        assert wh.query_df("SELECT status FROM runs").to_dicts() == [{"status": "cancelled"}]
        counts = wh.query_df("SELECT scenario, level, count(*) AS n FROM requests GROUP BY ALL").to_dicts()
        aggregates = wh.query_df(
            "SELECT scenario, level, requests_planned, requests_ok, requests_failed, stopped_reason "
            "FROM aggregates"
        ).to_dicts()
    n = {(c["scenario"], c["level"]): c["n"] for c in counts}
    level2 = n.pop(("concurrency_sweep", 2), 0)
    assert n == {("smoke", 1): 1, ("concurrency_sweep", 1): 2}
    assert_cut_level(aggregates, level2)
