"""Parquet export and import: every table to DIR/<table>.parquet, and back in one transaction."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import duckdb
import pyarrow as pa
from pyarrow import parquet

from strix_pipeline.records import VALUE_RULES
from strix_pipeline.safe_write import Folder
from strix_pipeline.warehouse.connection import WarehouseError, in_transaction, registered
from strix_pipeline.warehouse.decisions import replace_decisions_from
from strix_pipeline.warehouse.hosts import refresh_hosts
from strix_pipeline.warehouse.images import upsert_images_from
from strix_pipeline.warehouse.runs import RUN_TABLES
from strix_pipeline.warehouse.schema import project_schema, table_names
from strix_pipeline.warehouse.sql_names import quoted

log = logging.getLogger(__name__)

EXPORT_BATCH_ROWS = 100_000  # rows read and written at a time: an export holds one batch, not a table


def export_parquet(
    con: duckdb.DuckDBPyConnection, directory: str | Path, tables: Iterable[str] | None = None
) -> dict[str, Path]:
    """Write every table of the project (or the named ones) to DIR/<table>.parquet; works on a
    read-only open. A table the project does not define is named in the log and left out: its name is
    the writer's choice and never goes into SQL."""
    ours = project_schema().tables
    present = table_names(con)
    known = [name for name in present if name in ours]
    for name in present:
        if name not in ours:
            log.warning("the table %r is not the project's; not exported", name)
    names = list(tables) if tables is not None else known
    for name in names:
        if name not in known:
            raise WarehouseError(f"no table {name!r}")
    written: dict[str, Path] = {}
    # read as Arrow batches and written by pyarrow into the temporary file safe_write made (renamed
    # into place): no COPY, so a sandboxed reader, which reaches no file, exports too
    with Folder.open(directory, create=True) as out:
        for name in names:

            def copy(f: BinaryIO, table: str = name) -> None:
                reader = con.execute(f"SELECT * FROM {quoted(table)}").fetch_record_batch(EXPORT_BATCH_ROWS)
                with parquet.ParquetWriter(f, reader.schema, compression="zstd") as w:
                    for batch in reader:
                        w.write_batch(batch)

            written[name] = out.write(f"{name}.parquet", copy)
    return written


def import_parquet(
    con: duckdb.DuckDBPyConnection, directory: str | Path, *, replace: bool = False
) -> dict[str, int]:
    """Load what :func:`export_parquet` wrote (e.g. another Box's warehouse), in ONE transaction.

    A run or decision already here is refused, its ids named, unless ``replace``: then runs in
    ``runs.parquet`` replace the same run_ids here in every run table and decisions replace their
    evaluation_id. Images are upserted by (registry, repository, tag). Refused as well, before
    anything changes: rows of a run table whose run_id is not in ``runs.parquet`` (they would be
    orphans), a run_id twice in ``runs.parquet``, and any value the import rules refuse
    (:data:`~strix_pipeline.records.VALUE_RULES`, the rules ``strix import FILE`` applies), named by
    file, run, column and value. Columns are matched by name, so an export from an older schema
    imports (missing columns become NULL).
    """
    src = Path(directory)
    runs_file = src / "runs.parquet"
    if not runs_file.exists():
        raise WarehouseError(f"{src}: no runs.parquet (write one with `strix export --parquet DIR`)")

    # read here, in Python, and registered: the writer's connection reaches no file (connection._session)
    tables = {}
    for table in [*RUN_TABLES, "images", "decisions"]:
        f = src / f"{table}.parquet"
        if f.exists():
            try:
                tables[table] = parquet.read_table(f)
            except (OSError, pa.ArrowException) as e:
                raise WarehouseError(f"{f}: cannot be read as Parquet: {e}") from None

    names: dict[str, str] = {}  # table -> the name its Arrow table is registered under

    def pq(table: str) -> str | None:
        return names.get(table)

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
        twice = con.execute(
            f"SELECT run_id FROM {pq('runs')} GROUP BY run_id HAVING count(*) > 1 ORDER BY run_id LIMIT 5"
        ).fetchall()
        if twice:
            raise WarehouseError(f"{runs_file}: run_id {twice[0][0]!r} appears more than once")
        for table, cls in RUN_TABLES.items():
            if (source := pq(table)) is not None:
                _check_values(con, src / f"{table}.parquet", source, cls)
        if not replace:
            _refuse_existing(
                con, "run", "run_id", "runs", "SELECT run_id FROM _strix_import_ids", src / "runs.parquet"
            )
            if (source := pq("decisions")) is not None:
                ids = f"SELECT DISTINCT evaluation_id FROM {source}"
                _refuse_existing(
                    con, "decision", "evaluation_id", "decisions", ids, src / "decisions.parquet"
                )
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

    with contextlib.ExitStack() as stack:
        for table, data in tables.items():
            names[table] = stack.enter_context(registered(con, f"import_{table}", data))
        in_transaction(con, load)
    return counts


def _check_values(con: duckdb.DuckDBPyConnection, file: Path, source: str, cls: type) -> None:
    """Refuse the first value of ``source`` the import rules refuse, naming file, run, column, value."""
    have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    for rule in VALUE_RULES.get(cls, ()):
        if rule.field not in have or (rule.when is not None and rule.when[0] not in have):
            continue  # an older export without the column: it imports as NULL
        bad = con.execute(
            f'SELECT run_id, "{rule.field}" FROM {source} WHERE {rule.sql()} LIMIT 1'
        ).fetchall()
        if bad:
            run_id, value = bad[0]
            raise WarehouseError(
                f"{file}: run {run_id!r}: {rule.field} = {value!r} is refused: {rule.field} must "
                f"be {rule.says()}"
            )


def _refuse_existing(
    con: duckdb.DuckDBPyConnection, what: str, key: str, table: str, ids_sql: str, file: Path
) -> None:
    """Refuse to replace rows already in the warehouse that the user did not ask to replace."""
    rows = con.execute(
        f"SELECT DISTINCT {key} FROM {table} WHERE {key} IN ({ids_sql}) ORDER BY {key}"
    ).fetchall()
    if rows:
        ids = [r[0] for r in rows]
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        raise WarehouseError(
            f"{file}: {len(ids)} {what}(s) already in the warehouse: {shown} "
            f"(give --replace to replace them with the imported ones)"
        )
