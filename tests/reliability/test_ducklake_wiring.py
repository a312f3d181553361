"""One name for the warehouse: with ``[warehouse] backend = "ducklake"`` every path
that opens the warehouse opens the config's target, the DuckLake, and none reads or writes the DuckDB
file ``project.warehouse`` (which nobody reads then). Each on a real DuckLake on the PostgreSQL test
cluster: `strix doctor`'s "warehouse writable", `strix_dagster.run`'s benchmark selection, `strix
run`'s summary, `strix bench --save` and its RunNotStored path; and the Docker run launcher passes the
catalog variable into the run container.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
import types
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from support.ducklake import CATALOG_ENV, strix_config
from support.infra import free_port
from support.warehouse import T0, image, make_run

from strix_pipeline.config import DEFAULT_CONFIG, DuckLakeTarget, StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.warehouse import Warehouse

REPO = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def lake(postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty DuckLake, a strix.toml using it, the DSN exported, and the working directory a fresh
    one, so the config's relative project.warehouse and artifacts land in tmp_path."""

    db = postgres.create_database(f"wiring_{os.getpid()}_{time.monotonic_ns() % 10**9}")
    target = DuckLakeTarget(
        catalog_dsn=postgres.dsn(db), data_path=tmp_path / "lake", catalog_env=CATALOG_ENV
    )
    monkeypatch.setenv(CATALOG_ENV, target.catalog_dsn)
    monkeypatch.chdir(tmp_path)
    config_file = strix_config(tmp_path, target)
    return target, config_file, load_config(config_file)


def duckdb_file(config: StrixConfig) -> Path:
    return config.warehouse_path()  # the file backend's warehouse: must stay untouched here


@pytest.mark.postgres
def test_doctor_checks_the_lake_not_the_file(lake, monkeypatch: pytest.MonkeyPatch) -> None:
    from strix_pipeline.doctor.shared import _warehouse

    target, _, config = lake
    check = _warehouse(config)
    assert check.ok, check
    assert str(target) in check.detail  # "DuckLake warehouse <data path> (catalog from $VAR)"
    assert target.data_path.is_dir()  # the writer's open made the lake's data directory
    assert not duckdb_file(config).exists()
    monkeypatch.delenv(target.catalog_env)
    check = _warehouse(config)
    assert not check.ok and target.catalog_env in check.detail


@pytest.mark.postgres
def test_benchmark_selection_reads_the_lakes_images(lake, monkeypatch: pytest.MonkeyPatch) -> None:

    from strix_dagster import run as dagster_run

    target, _, config = lake
    known = image(
        "b7000", "sha256:b7", T0, engine="llamacpp", registry="ghcr.io", repository="ggml-org/llama.cpp"
    )
    with Warehouse.open(target) as wh:
        wh.upsert_images([known])
    seen: list[list] = []

    def image_for_key(config, images, key):
        seen.append(images)
        return None

    monkeypatch.setattr(dagster_run.image_scan, "image_for_key", image_for_key)
    dagster_run.benchmark_selection(config, "llamacpp:b7000@sha256b7")
    assert seen == [[known]]
    assert not duckdb_file(config).exists()


@pytest.mark.postgres
def test_strix_run_reports_the_runs_in_the_lake(
    lake, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from strix_pipeline.cli import run as cli_run

    target, config_file, config = lake
    stored = make_run("local-llamacpp-run1", host="local")
    stored.run.dagster_run_id = "dagster-run-1"
    with Warehouse.open(target) as wh:
        wh.load_run(stored)

    def dagster_process(cmd: list[str], log: Path, verbose: bool = False) -> int:  # the Dagster run
        summary = Path(cmd[cmd.index("--summary") + 1])
        runs = [{"dagster_run_id": "dagster-run-1", "success": True, "partition": "llamacpp:b6000@x"}]
        summary.write_text(json.dumps({"runs": runs, "dagster_home": str(Path.cwd() / ".dagster")}))
        return 0

    monkeypatch.setattr(cli_run, "run_dagster", dagster_process)
    code = cli_run.run(argparse.Namespace(config=str(config_file), partition=None, engine=None))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "local-llamacpp-run1" in out and "DuckLake warehouse" in out
    assert not duckdb_file(config).exists()


def adhoc_result() -> types.SimpleNamespace:
    """What `strix bench` measured, as save_run reads it."""
    r = make_run("adhoc-1", host="adhoc")
    return types.SimpleNamespace(
        aggregates=r.aggregates, requests=r.requests, server_metrics=r.server_metrics, errors=[]
    )


def save(config: StrixConfig):
    from strix_pipeline.cli.bench import save_run

    return save_run(
        config,
        adhoc_result(),
        run_id="adhoc-1",
        url="http://127.0.0.1:1",
        model="m",
        profile_name="quick",
        started=datetime.now(UTC),
    )


@pytest.mark.postgres
def test_bench_save_loads_into_the_lake(lake) -> None:
    target, _, config = lake
    assert save(config) == target
    with Warehouse.open(target, read_only=True) as wh:
        assert wh.run_ids() == ["adhoc-1"]
    assert not duckdb_file(config).exists()


@pytest.mark.postgres
def test_bench_save_refused_by_the_lake_names_the_lake_and_keeps_the_spool(
    lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strix_pipeline.warehouse.spool import RunNotStored, pending, spool_dir

    target, _, config = lake
    # the catalog's server is not there: the lake cannot be attached
    monkeypatch.setenv(target.catalog_env, f"host=127.0.0.1 port={free_port()} dbname=nope connect_timeout=5")
    with pytest.raises(RunNotStored) as e:
        save(config)
    assert isinstance(e.value.warehouse, DuckLakeTarget)
    assert e.value.warehouse.data_path == target.data_path
    assert "DuckLake warehouse" in str(e.value)
    assert pending(spool_dir(config.artifacts_dir())) == [e.value.spool]
    assert not duckdb_file(config).exists()


def test_the_docker_run_launcher_passes_the_catalog_variable() -> None:
    """The run container opens the lake too: the DSN's variable (the one default.toml and
    docs/warehouse.md name) is among those the launcher forwards."""
    named = re.search(r'catalog_env = "(\w+)"', DEFAULT_CONFIG.read_text())
    assert named is not None
    docker = yaml.safe_load((REPO / "strix_dagster" / "dagster-docker.yaml").read_text())
    assert named.group(1) in docker["run_launcher"]["config"]["env_vars"]
