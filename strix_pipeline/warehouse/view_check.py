"""The warehouse's stored views and macros held to the project's own SQL (issue 38).

The report, the charts and the decision read the views (``v_run_base`` and those built on it). A view is
SQL stored in the warehouse: whoever can write the warehouse -- on a shared DuckLake, any Box's writer
-- can redefine one (``v_run_base`` reading a local file into every reader's run pages), or store a
macro that shadows a built-in function the views call (a stored ``lower`` wins over DuckDB's). So
every open compares what is stored with what the project's migrations and ``views.sql`` make:

- a stored view of a project view's name whose definition differs is refused, named;
- a view standing where the project has a table is refused, named;
- any stored macro is refused, named (the project stores none).

A writer re-creates a changed view from views.sql instead (it is this code). Views the project does
not define are left alone: nothing of the project reads them. A project view
that is missing (an older schema) is not refused here; reading it fails by itself.

The expected definitions are made once per process in an in-memory DuckDB, so both sides are DuckDB's
own normalised text (``duckdb_views().sql``), whatever spacing or comments views.sql has.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb

from strix_pipeline.warehouse.connection import in_transaction
from strix_pipeline.warehouse.errors import WarehouseError
from strix_pipeline.warehouse.schema import install_views, migrations, views_sql

log = logging.getLogger(__name__)


class ForeignView(WarehouseError):
    """A stored view or macro that is not the project's; the message names it."""


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
            created = dict(_stored_views(con))
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
            stored = dict(_stored_views(con))
        finally:
            con.close()
    return ProjectSchema(
        views={name: frozenset({sql, stored.get(name, sql)}) for name, sql in created.items()}, tables=tables
    )


def _stored_views(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT internal ORDER BY view_name"
    ).fetchall()
    return [(name, _normal(sql)) for name, sql in rows]


def _normal(sql: str | None) -> str:
    # DuckDB writes its own text for a view; a lake's catalog may keep it without the final ";"
    return (sql or "").strip().rstrip(";").strip()


def check_views(con: duckdb.DuckDBPyConnection, where: object, *, writable: bool = False) -> None:
    """Refuse (:class:`ForeignView`, named) a stored view or macro that is not the project's. A writer
    (``writable``) re-creates the project's views instead of refusing a changed one: it is this code,
    and a warehouse nobody may write until someone drops a view by hand would keep every run out."""
    changed = _changed_view(con, where)
    if changed is not None and writable:
        log.warning(
            "%s: the stored view %s is not the project's definition; re-creating the views", where, changed
        )
        _reinstall_views(con, where)
        changed = _changed_view(con, where)
    if changed is not None:
        raise ForeignView(
            f"{where}: the stored view {changed} is not the project's definition (strix_pipeline/warehouse/"
            "sql/views.sql); refused, nothing was read through it. `strix migrate` (or any strix writer: "
            "strix run, strix bench --save, strix import, strix load-spool) re-creates the project's views"
        )
    macros = con.execute(
        "SELECT DISTINCT function_name FROM duckdb_functions() WHERE database_name = current_database() "
        "AND NOT internal AND function_type IN ('macro', 'table_macro') ORDER BY function_name"
    ).fetchall()
    if macros:
        raise ForeignView(
            f"{where}: the warehouse stores the macro {macros[0][0]} (the project stores none, and a stored "
            "macro takes the place of a built-in function of the same name in every view); refused"
        )


def _changed_view(con: duckdb.DuckDBPyConnection, where: object) -> str | None:
    expected = project_schema()
    for name, sql in _stored_views(con):
        if name in expected.tables:
            raise ForeignView(
                f"{where}: {name} is a view in the warehouse, where the project has a table; refused, "
                "nothing was read through it"
            )
        if name in expected.views and sql not in expected.views[name]:
            return name
    return None


def _reinstall_views(con: duckdb.DuckDBPyConnection, where: object) -> None:

    def work() -> None:
        # install_views re-creates them when their recorded hash differs: forget it
        con.execute("DELETE FROM schema_meta WHERE key = 'views_sha256'").fetchall()
        install_views(con, where)  # type: ignore[arg-type]

    in_transaction(con, work)
