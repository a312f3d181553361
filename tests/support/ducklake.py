"""A project config whose warehouse is a DuckLake: the catalog's DSN in CATALOG_ENV, data beside the test."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb

from strix_pipeline.config import DEFAULT_CONFIG, DuckLakeTarget
from strix_pipeline.warehouse.extensions import (
    DUCKLAKE_EXTENSIONS,
    LAKE,
    LAKE_CONFIG,
    extension_file,
    sql_str,
)
from support.report_seed import report_warehouse

CATALOG_ENV = "STRIX_TEST_LAKE_CATALOG"


def strix_config(tmp_path: Path, lake: DuckLakeTarget) -> Path:
    """The embedded default with its [warehouse] switched to this DuckLake: what a person writes."""
    text = DEFAULT_CONFIG.read_text()
    section = '[warehouse]\nbackend = "duckdb"\n'
    assert section in text
    text = text.replace(
        section,
        f'[warehouse]\nbackend = "ducklake"\ncatalog_env = "{CATALOG_ENV}"\ndata_path = "{lake.data_path}"\n',
    )
    p = tmp_path / "strix.toml"
    p.write_text(text)
    return p


def planting_connection(where: Path | DuckLakeTarget) -> duckdb.DuckDBPyConnection:
    """The warehouse opened for writing by plain DuckDB, as someone planting SQL in it would (not this
    code: its writers reach no file once open, so a planted view reading one could not be created)."""
    if isinstance(where, Path):
        return duckdb.connect(str(where))
    con = duckdb.connect(":memory:", config=dict(LAKE_CONFIG))
    for module, name in DUCKLAKE_EXTENSIONS:
        con.execute(f"LOAD {sql_str(extension_file(module, name))}").fetchall()
    data = sql_str(str(where.data_path).rstrip("/") + "/")
    con.execute(f"ATTACH {sql_str('ducklake:postgres:' + where.catalog_dsn)} AS {LAKE} (DATA_PATH {data})")
    con.execute(f"USE {LAKE}").fetchall()
    return con


def report_lake(postgres, tmp_path: Path, monkeypatch, name: str) -> tuple[DuckLakeTarget, Path]:
    """A DuckLake on a new database of the session's PostgreSQL, holding the report's seeded runs, its
    catalog's address in the environment; with a strix configuration file that points at it."""
    db = postgres.create_database(f"{name}_{os.getpid()}_{time.monotonic_ns() % 10**9}")
    target = DuckLakeTarget(
        catalog_dsn=postgres.dsn(db), data_path=tmp_path / "lake", catalog_env=CATALOG_ENV
    )
    wh, _ = report_warehouse(target)  # type: ignore[arg-type]
    wh.close()
    monkeypatch.setenv(CATALOG_ENV, target.catalog_dsn)
    return target, strix_config(tmp_path, target)
