"""The versioned schema: migrations and views, shipped as package data in ``sql/``.

``sql/migrations/NNNN_name.sql`` are applied in order, each in its own transaction, when a writer
opens an older warehouse; ``sql/views.sql`` is re-installed whenever its content changes (its hash is kept in
``schema_meta``). A file newer than this code is refused (:class:`SchemaTooNew`) rather than
half-understood. The files are read through :mod:`importlib.resources`, so an installed (not only an
editable) package finds them.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import tempfile
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import duckdb

from strix_pipeline.records import CriterionResult, ImageRecord
from strix_pipeline.warehouse.bisections import BisectionRecord, BisectionStep
from strix_pipeline.warehouse.changes import ChangeRecord
from strix_pipeline.warehouse.comparisons import ComparisonRecord, ComparisonRun
from strix_pipeline.warehouse.connection import Target, in_transaction, is_conflict
from strix_pipeline.warehouse.errors import WarehouseError, WarehouseUnavailable
from strix_pipeline.warehouse.noise import NoiseRecord
from strix_pipeline.warehouse.runs import RUN_TABLES
from strix_pipeline.warehouse.sql_names import quoted
from strix_pipeline.warehouse.traces import TraceRecord

log = logging.getLogger(__name__)

SQL_DIR: Traversable = resources.files("strix_pipeline.warehouse") / "sql"
MIGRATIONS_DIR: Traversable = SQL_DIR / "migrations"
VIEWS_FILE: Traversable = SQL_DIR / "views.sql"

# The tables whose columns are a record dataclass's fields, in order (a test holds them to it).
RECORD_TABLES: dict[str, type] = {
    **RUN_TABLES,
    "images": ImageRecord,
    "decisions": CriterionResult,
    "changes": ChangeRecord,
    "bisections": BisectionRecord,
    "bisection_steps": BisectionStep,
    "comparisons": ComparisonRecord,
    "comparison_runs": ComparisonRun,
    "noise_figures": NoiseRecord,
    "traces": TraceRecord,
}


class SchemaTooNew(WarehouseUnavailable):
    """The file was written by a newer strix-pipeline; this code will not guess at its schema."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


_MIGRATION_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def migrations(directory: Traversable | None = None) -> list[Migration]:
    """The forward migrations, in order; numbering must be 1..N without gaps."""
    directory = directory or MIGRATIONS_DIR
    found = []
    for p in sorted((p for p in directory.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name):
        m = _MIGRATION_RE.match(p.name)
        if not m:
            raise WarehouseError(f"{p}: migration files are named NNNN_lower_snake.sql")
        found.append(Migration(int(m.group(1)), m.group(2), p.read_text()))
    for i, m in enumerate(found, start=1):
        if m.version != i:
            raise WarehouseError(
                f"{directory}: migration {i:04d} is missing (found {m.version:04d}_{m.name})"
            )
    return found


def current_schema_version() -> int:
    return len(migrations())


def views_sql() -> str:
    return VIEWS_FILE.read_text()


@dataclass(frozen=True)
class ProjectSchema:
    # view name -> the texts DuckDB gives for the project's definition: as created, and as read back
    # from a file (storing a view re-writes some of it: UNPIVOT's column names come back as strings)
    views: dict[str, frozenset[str]]
    tables: frozenset[str]


@functools.cache
def project_schema() -> ProjectSchema:
    """The views and tables the project's SQL package makes (migrations, then views.sql)."""

    with tempfile.TemporaryDirectory(prefix="strix-views-") as scratch:
        path = str(Path(scratch) / "views.duckdb")
        con = duckdb.connect(path)
        try:
            for m in migrations():
                con.execute(m.sql).fetchall()
            con.execute(views_sql()).fetchall()
            created = dict(stored_views(con))
            tables = frozenset(
                r[0]
                for r in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                    "AND schema_name = 'main'"
                ).fetchall()
            )
        finally:
            con.close()
        con = duckdb.connect(path, read_only=True)
        try:
            stored = dict(stored_views(con))
        finally:
            con.close()
    return ProjectSchema(
        views={name: frozenset({sql, stored.get(name, sql)}) for name, sql in created.items()}, tables=tables
    )


def stored_views(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT internal ORDER BY view_name"
    ).fetchall()
    return [(name, _normal(sql)) for name, sql in rows]


def _normal(sql: str | None) -> str:
    # DuckDB writes its own text for a view; a lake's catalog may keep it without the final ";"
    return (sql or "").strip().rstrip(";").strip()


def _main_schema(con: duckdb.DuckDBPyConnection, catalog: str, name: str, where: str = "TRUE") -> list[str]:
    # The file's own objects: its main schema, not DuckDB's system or temp catalogs, nor an attached file.
    rows = con.execute(
        f"SELECT {name} FROM {catalog}() "
        f"WHERE database_name = current_database() AND schema_name = 'main' AND {where} ORDER BY {name}"
    ).fetchall()
    return [r[0] for r in rows]


def table_names(con: duckdb.DuckDBPyConnection) -> list[str]:
    return _main_schema(con, "duckdb_tables", "table_name")


def user_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    return _main_schema(con, "duckdb_views", "view_name", "NOT internal")


def stored_version(con: duckdb.DuckDBPyConnection) -> int:
    if "schema_version" not in table_names(con):
        return 0
    rows = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchall()
    return int(rows[0][0])


def prepare(con: duckdb.DuckDBPyConnection, path: Target, *, read_only: bool) -> int:
    """Check the warehouse's schema version and, when writable, migrate it and refresh the views.

    Returns the schema version the file is at afterwards. Call it straight from the opening function:
    the warning for an old file on a read-only open points at that function's caller.
    """
    all_migrations = migrations()
    code_version = len(all_migrations)
    stored = stored_version(con)
    if stored > code_version:
        raise SchemaTooNew(
            f"{path}: warehouse schema is v{stored}, newer than this strix-pipeline understands "
            f"(v{code_version}); upgrade strix-pipeline rather than risk misreading or damaging it"
        )
    if read_only:
        if stored < code_version:
            warnings.warn(
                f"{path}: warehouse schema is v{stored}, this code expects v{code_version}; "
                "`strix migrate` (or the next writer) migrates it; until then its views may be refused",
                stacklevel=3,
            )
        return stored
    if stored == code_version and not views_outdated(con, _digest(views_sql())):
        return stored  # up to date: nothing to migrate or install, no transaction needed
    return migrate(con, path, all_migrations, with_views=True)


def migrate(
    con: duckdb.DuckDBPyConnection, path: Target, target: list[Migration], *, with_views: bool
) -> int:
    """Apply the migrations of ``target`` the warehouse lacks, then (``with_views``) refresh the views;
    returns the version reached.

    Each migration is one transaction with its ``schema_version`` row, so a failure leaves the
    warehouse at the last whole migration, never half-way through one. Not all of them in one
    transaction: DuckDB 1.5 refuses to commit an ALTER TABLE after an UPDATE of the same table in one
    transaction ("another transaction has altered this table"), which 0002 (backfill) followed by
    0006 (new column) would be. Each step re-reads the version inside its transaction, so writers
    of a shared (DuckLake) warehouse opening it at once migrate it once: the loser of a commit
    conflict runs its step again and finds it done.
    """

    def step() -> bool:
        now = stored_version(con)
        if now >= len(target):
            return False
        m = target[now]
        try:
            # Views are derived: drop them so a migration can reshape the tables under them; the
            # view hash goes with them, so whoever opens next installs them again.
            _drop_views(con)
            con.execute(m.sql).fetchall()
            con.execute("DELETE FROM schema_meta WHERE key = 'views_sha256'").fetchall()
            con.execute(
                "INSERT INTO schema_version VALUES (?, ?, ?)", [m.version, m.name, datetime.now(UTC)]
            ).fetchall()
        except duckdb.Error as e:
            if is_conflict(e):
                raise  # in_transaction runs it again on the new snapshot
            raise WarehouseError(
                f"{path}: migration {m.version:04d}_{m.name} failed, warehouse left unchanged by it "
                f"(it stays at v{now}): {e}"
            ) from e
        return True

    while in_transaction(con, step):
        pass
    if with_views:
        in_transaction(con, lambda: install_views(con, path))
    return stored_version(con)


def _digest(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


def _drop_views(con: duckdb.DuckDBPyConnection) -> None:
    # Only the project's own views, by the names views.sql gives them (DuckDB matches them whatever the
    # stored case): a name read from the catalog is whatever its writer chose, SQL included.
    for name in sorted(project_schema().views):
        con.execute(f"DROP VIEW IF EXISTS {quoted(name)}").fetchall()


def foreign_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The stored views that are not the project's (by name, whatever the case): left alone, named."""
    ours = {name.lower() for name in project_schema().views}
    return [name for name in user_views(con) if name.lower() not in ours]


def views_outdated(con: duckdb.DuckDBPyConnection, digest: str) -> bool:
    """Whether the installed views were made from other views.sql than the one hashing to ``digest``."""
    rows = con.execute("SELECT value FROM schema_meta WHERE key = 'views_sha256'").fetchall()
    return not rows or rows[0][0] != digest


def install_views(con: duckdb.DuckDBPyConnection, path: Target) -> None:
    """Re-create the views when views.sql changed since they were installed (inside a transaction)."""
    sql = views_sql()
    digest = _digest(sql)
    if not views_outdated(con, digest):
        return
    for name in foreign_views(con):
        log.warning(
            "%s: the stored view %r is not the project's; left alone (nothing here reads it)", path, name
        )
    try:
        _drop_views(con)
        con.execute(sql).fetchall()
        # No key constraint backs schema_meta.key (DuckLake has none): replace the row.
        con.execute("DELETE FROM schema_meta WHERE key = 'views_sha256'").fetchall()
        con.execute("INSERT INTO schema_meta VALUES ('views_sha256', ?)", [digest]).fetchall()
    except duckdb.Error as e:
        if is_conflict(e):
            raise
        raise WarehouseError(f"{path}: views.sql failed, warehouse left unchanged: {e}") from e
