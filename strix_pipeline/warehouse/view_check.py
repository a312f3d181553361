"""The warehouse's stored views and macros held to the project's own SQL.

The report, the charts and the decision read the views (``v_run_base`` and those built on it). A view is
SQL stored in the warehouse: whoever can write the warehouse -- on a shared DuckLake, any Box's writer
-- can redefine one (``v_run_base`` reading a local file into every reader's run pages), or store a
macro that shadows a built-in function the views call (a stored ``lower`` wins over DuckDB's). So
every open compares what is stored with what the project's migrations and ``views.sql`` make:

- a stored view of a project view's name whose definition differs is refused, named;
- a view standing where the project has a table, or a table where it has a view, is refused, named;
- any stored macro is refused, named (the project stores none).

Names are compared as DuckDB resolves them, without regard to case: a view stored as ``"V_RUN_BASE"``
is what ``v_run_base`` reads, so it is held to the project's ``v_run_base``.

A writer re-creates a changed view from views.sql instead (it is this code). Views the project does
not define are left alone: nothing of the project reads them. A project view
that is missing (an older schema) is not refused here; reading it fails by itself.

The expected definitions are made once per process in an in-memory DuckDB, so both sides are DuckDB's
own normalised text (``duckdb_views().sql``), whatever spacing or comments views.sql has.
"""

from __future__ import annotations

import logging

import duckdb

from strix_pipeline.warehouse.connection import in_transaction
from strix_pipeline.warehouse.errors import WarehouseError
from strix_pipeline.warehouse.schema import install_views, project_schema, stored_views, table_names

log = logging.getLogger(__name__)


class ForeignView(WarehouseError):
    """A stored view or macro that is not the project's; the message names it."""


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
    views = {name.lower(): name for name in expected.views}
    tables = {name.lower() for name in expected.tables}
    for name, sql in stored_views(con):
        key = name.lower()
        if key in tables:
            raise ForeignView(
                f"{where}: {name!r} is a view in the warehouse, where the project has the table {key}; "
                "refused, nothing was read through it"
            )
        if key in views and (name != views[key] or sql not in expected.views[views[key]]):
            return name if name.isidentifier() else repr(name)
    for name in table_names(con):
        if name.lower() in views:
            raise ForeignView(
                f"{where}: {name!r} is a table in the warehouse, where the project has the view "
                f"{views[name.lower()]}; refused, nothing was read through it"
            )
    return None


def _reinstall_views(con: duckdb.DuckDBPyConnection, where: object) -> None:

    def work() -> None:
        # install_views re-creates them when their recorded hash differs: forget it
        con.execute("DELETE FROM schema_meta WHERE key = 'views_sha256'").fetchall()
        install_views(con, where)  # type: ignore[arg-type]

    in_transaction(con, work)
