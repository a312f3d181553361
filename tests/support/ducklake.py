"""A project config whose warehouse is a DuckLake: the catalog's DSN in CATALOG_ENV, data beside the test."""

from __future__ import annotations

from pathlib import Path

from strix_pipeline.config import DEFAULT_CONFIG, DuckLakeTarget

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
