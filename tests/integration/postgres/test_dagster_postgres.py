"""Two Dagster runs for the same Box queue through the pool even when launched from
two processes, on an instance whose run and event storage are a real PostgreSQL.

The instance is strix_dagster/dagster-postgres.yaml as shipped, copied into a fresh $DAGSTER_HOME, its
connection fields read from DAGSTER_PG_* (a database of its own in the session's throwaway cluster,
tests/support/postgres_server.py). The deployment is the real one: `dagster-daemon run` dequeues runs
(QueuedRunCoordinator) and launches each in its own process (DefaultRunLauncher -> `dagster api
execute_run`), whose multiprocess executor claims the pool slot in PostgreSQL before the step
process starts. Runs are submitted with `dagster job launch`, each from its own OS process, as two
people or two machines would. The code location (tests/support/dagster_pool_location.py) is the project's
Definitions with only the engine replaced by tests/support/engine_standin.py, which records when it held the
host; the sensor and schedule are left out so that the daemon adds no runs of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
import yaml
from support.engine_standin import EngineStandIn
from support.engine_standin import intervals as standin_intervals
from support.paths import REPO, SUPPORT
from support.pipeline_helpers import local_partition, resources_for, vllm_image, wait_for, write_config
from support.postgres_server import Postgres

import assets.benchmark as bench_mod
from assets.partitions import image_versions
from schedules import HOST_TAG, host_job_name
from strix_dagster.definitions import build_definitions
from strix_pipeline import image_scan
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.records import ImageRecord
from strix_pipeline.warehouse import Warehouse

pytestmark = pytest.mark.postgres  # the session's throwaway cluster: tests/conftest.py postgres

INSTANCE_YAML = REPO / "strix_dagster" / "dagster-postgres.yaml"
DOCKER_YAML = REPO / "strix_dagster" / "dagster-docker.yaml"
BIN = Path(sys.executable).parent
HOLD_S = 2.0
# Every wait below is bounded; a run worker on two loaded cores takes ~10 s to start.
LAUNCH_TIMEOUT_S = 180
RUNS_TIMEOUT_S = 300


def _pg_env(postgres: Postgres, db: str) -> dict[str, str]:
    return {
        "DAGSTER_PG_HOST": postgres.host,
        "DAGSTER_PG_PORT": str(postgres.port),
        "DAGSTER_PG_USERNAME": postgres.user,
        "DAGSTER_PG_PASSWORD": "",  # trust authentication on loopback
        "DAGSTER_PG_DB": db,
    }


@dataclass
class Deployment:
    """A $DAGSTER_HOME with the shipped yaml, its database, a box+local config, the stand-in's folder."""

    home: Path
    db: str
    env: dict[str, str]
    config_path: Path
    out: Path
    keys: dict[str, str]  # host -> the partition key benchmarked there
    instance: dg.DagsterInstance
    workspace: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.out.glob("*.log"))
        )


@pytest.fixture
def deployment(postgres: Postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    db = postgres.create_database(f"dagster_{uuid.uuid4().hex[:10]}")
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(INSTANCE_YAML, home / "dagster.yaml")
    config_path = write_config(tmp_path, box=True)
    config = load_config(config_path)
    local, box = image_scan.local_image("llamacpp"), vllm_image("v0.26.0", "b")
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images([local, box])
    out = tmp_path / "out"
    out.mkdir()
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        yaml.safe_dump(
            {
                "load_from": [
                    {
                        "python_file": {
                            "relative_path": str(SUPPORT / "dagster_pool_location.py"),
                            "working_directory": str(REPO),
                            "location_name": "strix",
                        }
                    }
                ]
            }
        )
    )
    env = {
        **_pg_env(postgres, db),
        "DAGSTER_HOME": str(home),
        "STRIX_CONFIG": str(config_path),
        "STRIX_POOL_OUT": str(out),
        "STRIX_POOL_HOLD_S": str(HOLD_S),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    keys = {"local": partition_key("llamacpp", local), "box": partition_key("vllm", box)}
    # Entered, so the test body runs in this instance's scope: Definitions resolved in the test read
    # this instance's defs-state storage, which lives as long as the test, never one of an instance
    # that is gone ("undefined DagsterInstance weakref", seen once in the full suite).
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(image_versions.name, sorted(set(keys.values())))
        dep = Deployment(home, db, env, config_path, out, keys, instance, workspace)
        try:
            yield dep
        finally:
            for host in dep.keys:  # a stand-in still holding a host lets go
                (out / f"release-{host}").touch()
            _end_groups(dep.procs)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _end_groups(procs: list[subprocess.Popen], timeout_s: float = 20.0) -> None:
    """End the processes this test started and everything they started -- each its own process group,
    ended by its id: the daemon's code server, run workers and step processes outlive the daemon."""
    for p in procs:
        if _group_alive(p.pid):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    while any(_group_alive(p.pid) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    for p in procs:
        if _group_alive(p.pid):
            os.killpg(p.pid, signal.SIGKILL)
        if p.poll() is None:
            p.wait(timeout=10)


def _spawn(dep: Deployment, name: str, cmd: list[str], **env: str) -> subprocess.Popen:
    log = open(dep.out / f"{name}.log", "wb")  # handed to the child
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env={**os.environ, **dep.env, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: teardown ends it and its children by id
    )
    log.close()
    dep.procs.append(proc)
    return proc


def _launch(dep: Deployment, name: str, host: str, run_id: str) -> subprocess.Popen:
    """`dagster job launch` of host's job for its partition, from a process of its own."""
    tags = json.dumps({"dagster/partition": dep.keys[host]})
    cmd = [str(BIN / "dagster"), "job", "launch", "-w", str(dep.workspace), "-j", host_job_name(host)]
    return _spawn(dep, name, [*cmd, "--tags", tags, "--run-id", run_id])


def _step_interval(instance: dg.DagsterInstance, run_id: str, step_key: str) -> tuple[float, float]:
    """[STEP_START, STEP_SUCCESS] of the step, wall clock, from the event log in PostgreSQL. The step's
    pool slot is claimed before STEP_START and freed after STEP_SUCCESS, so these lie inside it."""
    ev = {
        e.dagster_event.event_type: e.timestamp
        for e in instance.all_logs(run_id)
        if e.dagster_event is not None and e.step_key == step_key
    }
    return ev[dg.DagsterEventType.STEP_START], ev[dg.DagsterEventType.STEP_SUCCESS]


def _event_time(instance: dg.DagsterInstance, run_id: str, kind: dg.DagsterEventType) -> float:
    return next(e.timestamp for e in instance.all_logs(run_id, of_type=kind))


def test_same_box_runs_queue_through_the_pool_across_processes(deployment: Deployment) -> None:
    dep, instance = deployment, deployment.instance
    config = load_config(dep.config_path)
    box_step = build_definitions(config, str(dep.config_path)).resolve_job_def(host_job_name("box"))
    (box_asset,) = box_step.asset_layer.executable_asset_keys
    box_step_key, local_step_key = box_asset.to_python_identifier(), "benchmark_run_local"
    _spawn(
        dep,
        "daemon",
        [str(BIN / "dagster-daemon"), "run", "-w", str(dep.workspace)],
        STRIX_POOL_RELEASE_HOST="box",  # the first box run holds the Box until the test lets it go
        STRIX_POOL_RENDEZVOUS_HOST="local",  # the local run enters only while a box run is inside
    )
    box_runs = [str(uuid.uuid4()), str(uuid.uuid4())]
    local_run = str(uuid.uuid4())
    launches = [
        _launch(dep, "launch-box-1", "box", box_runs[0]),
        _launch(dep, "launch-box-2", "box", box_runs[1]),
        _launch(dep, "launch-local", "local", local_run),
    ]
    for p in launches:
        p.wait(timeout=LAUNCH_TIMEOUT_S)
    assert [p.returncode for p in launches] == [0, 0, 0], dep.logs()
    all_runs = [*box_runs, local_run]
    records = {r: instance.get_run_record_by_id(r) for r in all_runs}
    assert all(records.values()), "a launched run is missing from the PostgreSQL run storage"

    inside = lambda host: list(dep.out.glob(f"inside-{host}__*"))  # noqa: E731
    wait_for(
        "a box run and the local run to hold their hosts",
        lambda: inside("box") and inside("local"),
        RUNS_TIMEOUT_S,
        poll_s=0.25,
        context=lambda: f"\n{dep.logs()}",
    )
    # The second box run had at least as long to enter as the local run needed from its submission to
    # holding its host (plus a margin): if the pool did not stop it, it would be inside by now.
    local_latency = inside("local")[0].stat().st_mtime - records[local_run].create_timestamp.timestamp()
    last_box_submitted = max(records[r].create_timestamp.timestamp() for r in box_runs)
    wait_for(
        "the second box run's chance to enter",
        lambda: time.time() >= last_box_submitted + local_latency + 5,
        RUNS_TIMEOUT_S,
        poll_s=0.25,
        context=lambda: f"\n{dep.logs()}",
    )
    assert len(inside("box")) == 1, f"both box runs held the Box at once: {inside('box')}"
    (dep.out / "release-box").touch()

    def finished() -> bool:
        return all(instance.get_run_by_id(r).is_finished for r in all_runs)

    wait_for(
        "the three runs to finish", finished, RUNS_TIMEOUT_S, poll_s=0.25, context=lambda: f"\n{dep.logs()}"
    )
    for r in all_runs:
        assert instance.get_run_by_id(r).is_success, f"run {r} did not succeed\n{dep.logs()}"

    # From the event log in PostgreSQL: the two box steps never overlap, the local one overlaps a box one.
    box = sorted((_step_interval(instance, r, box_step_key), r) for r in box_runs)
    (first_start, first_end), first = box[0]
    (second_start, second_end), second = box[1]
    local_start, local_end = _step_interval(instance, local_run, local_step_key)
    print(
        f"box run 1 held the Box {0:.2f}-{first_end - first_start:.2f} s, box run 2 "
        f"{second_start - first_start:.2f}-{second_end - first_start:.2f} s, local run "
        f"{local_start - first_start:.2f}-{local_end - first_start:.2f} s"
    )
    assert first_end <= second_start, f"box steps overlapped: {box}"
    assert local_start < first_end and first_start < local_end, "the other host's run did not overlap"
    # The second run was waiting while the first held the Box: submitted before the first let go.
    assert records[second].create_timestamp.timestamp() < first_end
    # The stand-ins' own clocks agree (CLOCK_MONOTONIC, shared by all processes).
    held = sorted(standin_intervals(dep.out, "box").values())
    assert len(held) == 2 and held[0][1] <= held[1][0], held
    # Where it waited: in the daemon's run queue (strix/host admits one run per Box in progress), so
    # it was not even launched while the first held the Box; a step-slot wait would be logged.
    launched = _event_time(instance, second, dg.DagsterEventType.RUN_STARTING)
    blocked = [
        e for e in instance.all_logs(second) if "blocked by limit for pool host_box" in (e.message or "")
    ]
    print(
        f"second box run: launched {launched - first_start:.2f} s after the first took the Box, "
        f"{len(blocked)} step-slot wait event(s)"
    )
    assert launched >= first_end, "the second box run was launched while the first held the Box"
    limits = {p.name: p.limit for p in instance.event_log_storage.get_pool_limits()}
    assert limits.get("host_box") == 1 and limits.get("host_local") == 1, limits
    # The host is a run tag on every run (the host's job tags its runs): the Runs page filters by it.
    for r in box_runs:
        assert instance.get_run_by_id(r).tags[HOST_TAG] == "box"
    assert instance.get_run_by_id(local_run).tags[HOST_TAG] == "local"
    box_filtered = {r.run_id for r in instance.get_runs(dg.RunsFilter(tags={HOST_TAG: "box"}))}
    assert box_filtered == set(box_runs)


def test_backfill_of_one_host_launches_only_that_hosts_runs(deployment: Deployment) -> None:
    """`dagster job backfill` of the box's job over two versions queues two runs in PostgreSQL (no
    daemon here, so they stay queued), each tagged strix/host=box and planning only the box's step."""
    dep, instance = deployment, deployment.instance
    latest = vllm_image("latest", "c", floating=True)
    config = load_config(dep.config_path)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images([latest])
    instance.add_dynamic_partitions(image_versions.name, [partition_key("vllm", latest)])
    keys = sorted([dep.keys["box"], partition_key("vllm", latest)])
    cmd = [str(BIN / "dagster"), "job", "backfill", "-w", str(dep.workspace), "-j", host_job_name("box")]
    proc = _spawn(dep, "backfill", [*cmd, "--partitions", ",".join(keys), "--noprompt"])
    proc.wait(timeout=LAUNCH_TIMEOUT_S)
    assert proc.returncode == 0, dep.logs()
    runs = instance.get_runs()
    assert sorted(r.tags["dagster/partition"] for r in runs) == keys
    for r in runs:
        assert r.tags[HOST_TAG] == "box" and r.tags.get("dagster/backfill"), r.tags
        assert r.status == dg.DagsterRunStatus.QUEUED
        plan_snap = instance.get_execution_plan_snapshot(r.execution_plan_snapshot_id)
        assert [s.key for s in plan_snap.steps] == ["benchmark_run_box"]
    assert len(instance.get_runs(dg.RunsFilter(tags={HOST_TAG: "box"}))) == 2
    assert not instance.get_runs(dg.RunsFilter(tags={HOST_TAG: "local"}))


def test_a_version_on_two_boxes_is_one_run_per_box(tmp_path: Path) -> None:
    """The weekly schedule asks for one run per host of a version two Boxes run, each tagged with its
    host and holding only its own benchmark asset (so each waits only for its own Box's pool); each
    host's job carries that host as a run tag."""
    path = write_config(tmp_path, box=True)
    text = path.read_text()
    box2 = text[text.index("[hosts.box]") :].split("\n\n")[0].replace("[hosts.box]", "[hosts.box2]")
    text = text.replace("[engines.llamacpp]", box2 + "\n\n[engines.llamacpp]")
    text = text.replace(
        'box = [{ engine = "vllm"',
        'box2 = [{ engine = "vllm", model = "gemma3-270m", profile = "tiny" }]\nbox = [{ engine = "vllm"',
    )
    path.write_text(text)
    config = load_config(path)
    assert set(config.runs) == {"local", "box", "box2"}
    v26 = vllm_image("v0.26.0", "b")
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images([v26])
    defs = build_definitions(config, str(path))
    for host in ("local", "box", "box2"):
        job = defs.resolve_job_def(host_job_name(host))
        assert job.run_tags[HOST_TAG] == host
        assert job.asset_layer.executable_asset_keys == {dg.AssetKey(f"benchmark_run_{host}")}
    schedule = defs.resolve_schedule_def("weekly_benchmark")
    when = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        ctx = dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=when,
            resources=resources_for(path),
            repository_def=defs.get_repository_def(),
        )
        requests = [r for r in schedule.evaluate_tick(ctx).run_requests if r.partition_key == _key(v26)]
    by_host = {r.tags[HOST_TAG]: r for r in requests}
    assert sorted(by_host) == ["box", "box2"] and len(requests) == 2
    for host, r in by_host.items():
        assert r.asset_selection == [dg.AssetKey(f"benchmark_run_{host}")]
        assert r.run_key == f"weekly-2026-11-30-{v26.digest}@{host}"
        assert r.tags["strix/digest"] == v26.digest


def _key(image: ImageRecord) -> str:
    return partition_key(image.engine, image)


def test_instance_storage_is_postgres(
    postgres: Postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped yaml gives run, event-log and schedule storage in PostgreSQL: after a run its rows
    (run, tags, events, the dynamic partition, the pool) are in the test's own database."""
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    db = postgres.create_database(f"dagster_{uuid.uuid4().hex[:10]}")
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(INSTANCE_YAML, home / "dagster.yaml")
    for k, v in {**_pg_env(postgres, db), "DAGSTER_HOME": str(home)}.items():
        monkeypatch.setenv(k, v)
    # no literal secret or address in the file: every connection field is read from the environment
    fields = yaml.safe_load(INSTANCE_YAML.read_text())["storage"]["postgres"]["postgres_db"]
    secrets = {k: v for k, v in fields.items() if k != "scheme"}
    assert set(secrets) == {"hostname", "port", "username", "password", "db_name"}
    assert all(set(v) == {"env"} for v in secrets.values()), fields
    seeded = local_partition(tmp_path)
    path, config, key, out = seeded.config_path, seeded.config, seeded.key, seeded.out
    monkeypatch.setattr(bench_mod, "run_benchmark", EngineStandIn(out, hold_s=0.1))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        assert instance.run_coordinator.__class__.__name__ == "QueuedRunCoordinator"
        assert instance.run_launcher.__class__.__name__ == "DefaultRunLauncher"
        instance.add_dynamic_partitions(image_versions.name, [key])
        job = build_definitions(config, str(path)).resolve_job_def(host_job_name("local"))
        result = job.execute_in_process(instance=instance, partition_key=key, raise_on_error=False)
        assert result.success
    run_id = result.run_id
    tables = set(postgres.psql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'", db).split())
    assert {"runs", "run_tags", "event_logs", "dynamic_partitions", "concurrency_limits"} <= tables
    assert postgres.psql(f"SELECT status FROM runs WHERE run_id = '{run_id}'", db) == "SUCCESS"
    assert (
        postgres.psql(f"SELECT value FROM run_tags WHERE run_id = '{run_id}' AND key = '{HOST_TAG}'", db)
        == "local"
    )
    steps = postgres.psql(
        f"SELECT count(*) FROM event_logs WHERE run_id = '{run_id}' AND step_key = 'benchmark_run'"
        " AND dagster_event_type IN ('STEP_START', 'STEP_SUCCESS')",
        db,
    )
    assert steps == "2"
    events = postgres.psql(f"SELECT count(*) FROM event_logs WHERE run_id = '{run_id}'", db)
    print(f"one benchmark run wrote {events} event-log rows to PostgreSQL")  # a base for scale estimates
    assert postgres.psql("SELECT partition FROM dynamic_partitions", db) == key
    assert (
        postgres.psql("SELECT \"limit\" FROM concurrency_limits WHERE concurrency_key = 'host_local'", db)
        == "1"
    )
    # ... and nothing of it in a local SQLite file under $DAGSTER_HOME
    assert not list(home.rglob("*.db")), list(home.rglob("*.db"))


def test_docker_launcher_instance_matches_the_postgres_one() -> None:
    """The documented Docker-worker instance is the PostgreSQL one with only the run launcher changed,
    so the two cannot drift apart (pools, queue, storage)."""
    pg = yaml.safe_load(INSTANCE_YAML.read_text())
    docker = yaml.safe_load(DOCKER_YAML.read_text())
    assert {k: v for k, v in docker.items() if k != "run_launcher"} == {
        k: v for k, v in pg.items() if k != "run_launcher"
    }
    launcher = docker["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_docker", "DockerRunLauncher")
    # the run container reaches the same PostgreSQL: every DAGSTER_PG_* variable is passed into it
    assert {
        "DAGSTER_PG_HOST",
        "DAGSTER_PG_PORT",
        "DAGSTER_PG_USERNAME",
        "DAGSTER_PG_PASSWORD",
        "DAGSTER_PG_DB",
    } <= set(launcher["config"]["env_vars"])
    # and the concurrency section is the single-machine one (the same pools, the same limits)
    single = yaml.safe_load((REPO / "strix_dagster" / "dagster.yaml").read_text())["concurrency"]
    assert pg["concurrency"]["pools"]["default_limit"] == single["pools"]["default_limit"] == 1
    assert pg["concurrency"]["pools"]["granularity"] == single["pools"]["granularity"]
    assert pg["concurrency"]["runs"] == single["runs"]
    # one run per Box in progress, decided by the daemon alone (tagged runs: the sensor, the schedule, a
    # host's job)
    assert {"key": HOST_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in pg["concurrency"][
        "runs"
    ]["tag_concurrency_limits"]
