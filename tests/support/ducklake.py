"""A project config whose warehouse is a DuckLake: the catalog's DSN in CATALOG_ENV, data beside the test."""

from __future__ import annotations

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
