"""Where the project keeps its things: the warehouse file or lakehouse, the artifacts, the weekly
schedule and time zone, and what bounds a ``strix query``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from strix_pipeline.config.rules import (
    MAX_ROWS,
    ConfigPath,
    EnvName,
    Version,
    _memory_size,
    _Strict,
    _time_zone,
    check_timeout,
    validate_cron,
)


@dataclass(frozen=True)
class DuckLakeTarget:
    """A DuckLake warehouse to open: the catalog's libpq DSN (a secret: never in repr or messages,
    which name ``catalog_env`` instead) and the directory of its data files."""

    catalog_dsn: str = field(repr=False)
    data_path: Path
    catalog_env: str = ""  # the variable the DSN came from, for messages

    def __str__(self) -> str:
        source = f" (catalog from ${self.catalog_env})" if self.catalog_env else ""
        return f"DuckLake warehouse {self.data_path}{source}"


class ProjectConfig(_Strict):
    warehouse: ConfigPath = "warehouse/strix.duckdb"
    artifacts: ConfigPath = "artifacts"  # charts, engine logs, decision JSON
    timezone: Annotated[str, AfterValidator(_time_zone)] = "UTC"
    schedule: str = "0 3 * * 1"  # weekly_benchmark: Monday 03:00
    # a run deferred (its window too short) this many weeks goes first, before every other run
    # (planning.priority.rank): no run waits longer than this for its night
    starve_weeks: Annotated[int, Field(ge=1, le=52)] = 2
    harness_version: Version | None = None

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str) -> str:
        return validate_cron(v)


class WarehouseConfig(_Strict):
    """Where results are stored: the single DuckDB file ``project.warehouse`` (``backend = "duckdb"``,
    the embedded default), or a DuckLake lakehouse several writers share (``backend = "ducklake"``):
    its catalog in PostgreSQL, its Parquet data files in ``data_path``, a directory every writer
    reaches. The catalog's libpq DSN may hold a password, so the config names only the environment
    variable that holds it (``catalog_env``), as for every other secret."""

    backend: Literal["duckdb", "ducklake"] = "duckdb"
    catalog_env: EnvName | None = (
        None  # e.g. "STRIX_WAREHOUSE_CATALOG" = "host=db port=5432 dbname=strix user=strix"
    )
    data_path: ConfigPath | None = None

    @model_validator(mode="after")
    def _ducklake_needs(self) -> WarehouseConfig:
        if self.backend == "ducklake":
            missing = [k for k in ("catalog_env", "data_path") if not getattr(self, k)]
            if missing:
                raise ValueError(f'backend "ducklake" needs {" and ".join(missing)}')
        elif self.catalog_env or self.data_path:
            raise ValueError('catalog_env and data_path are for backend "ducklake"')
        return self


class QueryConfig(_Strict):
    """What bounds a ``strix query`` (``--timeout`` and ``--memory-limit`` override them per call)."""

    # a query that runs longer is stopped: while it runs, no writer can load into a warehouse file
    timeout_s: Annotated[float, AfterValidator(check_timeout)] = 300.0  # 0: no limit
    # DuckDB's size syntax, e.g. "2GB"; None: DuckDB's default, 80 % of RAM (a query has no spill
    # directory, so one that needs more fails rather than swapping)
    memory_limit: Annotated[
        str | None, AfterValidator(lambda v: _memory_size(v) if v is not None else None)
    ] = None
    # the most of a result a query hands over (a bigger one is cut, and that is said): DuckDB's
    # memory_limit bounds the query, not its result, which is held in this process
    max_rows: Annotated[int, Field(gt=0, le=MAX_ROWS)] = 1_000_000
    max_bytes: Annotated[str, AfterValidator(_memory_size)] = "256MB"


def resolve_path(p: str) -> Path:
    """A configured path; a relative one is relative to the working directory (where `make` and
    `strix` run), never to where the package happens to be installed."""
    path = Path(os.path.expandvars(os.path.expanduser(p)))
    return path if path.is_absolute() else Path.cwd() / path
