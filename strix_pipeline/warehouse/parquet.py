"""Parquet export and import: every table to DIR/<table>.parquet, and back in one transaction."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import duckdb

from strix_pipeline.warehouse.connection import WarehouseError, in_transaction
from strix_pipeline.warehouse.decisions import replace_decisions_from
from strix_pipeline.warehouse.hosts import refresh_hosts
from strix_pipeline.warehouse.images import upsert_images_from
from strix_pipeline.warehouse.runs import RUN_TABLES
from strix_pipeline.warehouse.schema import table_names


def export_parquet(
    con: duckdb.DuckDBPyConnection, directory: str | Path, tables: Iterable[str] | None = None
) -> dict[str, Path]:
    """Write every table (or the named ones) to DIR/<table>.parquet; works on a read-only open."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    known = table_names(con)
    names = list(tables) if tables is not None else known
    written: dict[str, Path] = {}
    for name in names:
        if name not in known:
            raise WarehouseError(f"no table {name!r}")
        target = out / f"{name}.parquet"
        quoted = str(target).replace("'", "''")
        con.execute(f"COPY (SELECT * FROM \"{name}\") TO '{quoted}' (FORMAT parquet)").fetchall()
        written[name] = target
    return written


def import_parquet(con: duckdb.DuckDBPyConnection, directory: str | Path) -> dict[str, int]:
    """Load what :func:`export_parquet` wrote (e.g. another Box's warehouse), in ONE transaction.

    Runs in ``runs.parquet`` replace the same run_ids here in every run table; images are upserted
    by (registry, repository, tag); decisions replace their evaluation_id. Rows of a run table whose
    run_id is not in ``runs.parquet`` are refused (they would be orphans). Columns are matched by
    name, so an export from an older schema imports (missing columns become NULL).
    """
    src = Path(directory)
    runs_file = src / "runs.parquet"
    if not runs_file.exists():
        raise WarehouseError(f"{src}: no runs.parquet (write one with `strix export --parquet DIR`)")

    def pq(table: str) -> str | None:
        f = src / f"{table}.parquet"
        return "read_parquet('" + str(f).replace("'", "''") + "')" if f.exists() else None

    counts: dict[str, int] = {}

    def load() -> None:
        counts.clear()
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _strix_import_ids AS SELECT DISTINCT run_id FROM {pq('runs')}"
        ).fetchall()
        for table in RUN_TABLES:
            source = pq(table)
            if source is None or table == "runs":
                continue
            orphans = con.execute(
                f"SELECT count(*) FROM {source} WHERE run_id NOT IN (SELECT run_id FROM _strix_import_ids)"
            ).fetchall()[0][0]
            if orphans:
                raise WarehouseError(f"{src}/{table}.parquet: {orphans} row(s) of runs not in runs.parquet")
        for table in RUN_TABLES:
            con.execute(
                f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM _strix_import_ids)"
            ).fetchall()
        for table in RUN_TABLES:
            source = pq(table)
            if source is not None:
                counts[table] = con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {source}").fetchall()[
                    0
                ][0]
        hosts = [r[0] for r in con.execute(f"SELECT DISTINCT host FROM {pq('runs')}").fetchall()]
        if hosts:
            refresh_hosts(con, hosts)
        if (source := pq("images")) is not None:
            counts["images"] = upsert_images_from(con, source)
        if (source := pq("decisions")) is not None:
            counts["decisions"] = replace_decisions_from(con, source)
        con.execute("DROP TABLE _strix_import_ids").fetchall()

    in_transaction(con, load)
    return counts
