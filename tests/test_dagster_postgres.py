"""Done when (issue 18): two Dagster runs for the same Box queue through the pool even when launched from
two processes, on an instance whose run and event storage are a real PostgreSQL.

The instance is strix_dagster/dagster-postgres.yaml as shipped, copied into a fresh $DAGSTER_HOME, its
connection fields read from DAGSTER_PG_* (a database of its own in the session's throwaway cluster,
tests/postgres_server.py). The deployment is the real one: `dagster-daemon run` dequeues runs
(QueuedRunCoordinator) and launches each in its own process (DefaultRunLauncher -> `dagster api
execute_run`), whose multiprocess executor claims the pool slot in PostgreSQL before the step
process starts. Runs are submitted with `dagster job launch`, each from its own OS process, as two
people or two machines would. The code location (tests/dagster_pool_location.py) is the project's
Definitions with only the engine replaced by tests/engine_standin.py, which records when it held the
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
from pathlib import Path

import dagster as dg
import pytest
import yaml
from engine_standin import EngineStandIn
from engine_standin import intervals as standin_intervals
from pipeline_helpers import REPO, vllm_image, write_config

import assets.benchmark as bench_mod
from assets.partitions import image_versions
from schedules import HOST_TAG, host_job_name
from strix_dagster.definitions import build_definitions
from strix_pipeline import plan
from strix_pipeline.config import load_config
from strix_pipeline.warehouse import Warehouse

INSTANCE_YAML = REPO / "strix_dagster" / "dagster-postgres.yaml"
DOCKER_YAML = REPO / "strix_dagster" / "dagster-docker.yaml"
BIN = Path(sys.executable).parent
HOLD_S = 2.0
# Every wait below is bounded; a run worker on two loaded cores takes ~10 s to start.
LAUNCH_TIMEOUT_S = 180
RUNS_TIMEOUT_S = 300


def _pg_env(postgres, db: str) -> dict[str, str]:  # noqa: ANN001 - tests.postgres_server.Postgres
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
def deployment(postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:  # noqa: ANN001
    db = postgres.create_database(f"dagster_{uuid.uuid4().hex[:10]}")
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(INSTANCE_YAML, home / "dagster.yaml")
    config_path = write_config(tmp_path, box=True)
    config = load_config(config_path)
    local, box = plan.local_image("llamacpp"), vllm_image("v0.26.0", "b")
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
                            "relative_path": str(REPO / "tests" / "dagster_pool_location.py"),
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
    instance = dg.DagsterInstance.from_config(str(home))
    keys = {"local": plan.partition_key("llamacpp", local), "box": plan.partition_key("vllm", box)}
    instance.add_dynamic_partitions(image_versions.name, sorted(set(keys.values())))
    dep = Deployment(home, db, env, config_path, out, keys, instance, workspace)
    try:
        yield dep
    finally:
        for p in dep.procs:  # only the processes this test started, each its own process group
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in dep.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        instance.dispose()


def _spawn(dep: Deployment, name: str, cmd: list[str], **env: str) -> subprocess.Popen:
    log = open(dep.out / f"{name}.log", "wb")  # noqa: SIM115 - handed to the child
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


def _wait(what: str, ok, timeout_s: float, dep: Deployment) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}\n{dep.logs()}")


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
    _wait(
        "a box run and the local run to hold their hosts",
        lambda: inside("box") and inside("local"),
        RUNS_TIMEOUT_S,
        dep,
    )
    # The second box run had at least as long to enter as the local run needed from its submission to
    # holding its host (plus a margin): if the pool did not stop it, it would be inside by now.
    local_latency = inside("local")[0].stat().st_mtime - records[local_run].create_timestamp.timestamp()
    last_box_submitted = max(records[r].create_timestamp.timestamp() for r in box_runs)
    _wait(
        "the second box run's chance to enter",
        lambda: time.time() >= last_box_submitted + local_latency + 5,
        RUNS_TIMEOUT_S,
        dep,
    )
    assert len(inside("box")) == 1, f"both box runs held the Box at once: {inside('box')}"
    (dep.out / "release-box").touch()

    def finished() -> bool:
        return all(instance.get_run_by_id(r).is_finished for r in all_runs)

    _wait("the three runs to finish", finished, RUNS_TIMEOUT_S, dep)
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
    # Where it waited: in the daemon's run queue (not launched while the pool was full) or at the step.
    launched = _event_time(instance, second, dg.DagsterEventType.RUN_STARTING)
    blocked = [
        e for e in instance.all_logs(second) if "blocked by limit for pool host_box" in (e.message or "")
    ]
    print(
        f"second box run: launched {launched - first_start:.2f} s after the first took the Box"
        f" ({'held in the run queue' if launched >= first_end else 'launched, step waited for the slot'}),"
        f" {len(blocked)} pool-wait event(s)"
    )
    assert launched >= first_end or blocked, "the second box run neither queued nor waited for the slot"
    limits = {p.name: p.limit for p in instance.event_log_storage.get_pool_limits()}
    assert limits.get("host_box") == 1 and limits.get("host_local") == 1, limits
    # The host is a run tag on every run (the host's job tags its runs): the Runs page filters by it.
    for r in box_runs:
        assert instance.get_run_by_id(r).tags[HOST_TAG] == "box"
    assert instance.get_run_by_id(local_run).tags[HOST_TAG] == "local"
    box_filtered = {r.run_id for r in instance.get_runs(dg.RunsFilter(tags={HOST_TAG: "box"}))}
    assert box_filtered == set(box_runs)


def test_instance_storage_is_postgres(postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
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
    path = write_config(tmp_path)
    config = load_config(path)
    image = plan.local_image("llamacpp")
    key = plan.partition_key("llamacpp", image)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images([image])
    out = tmp_path / "out"
    out.mkdir()
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
