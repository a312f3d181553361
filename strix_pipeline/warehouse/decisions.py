"""Switch decisions (table ``decisions``): one evaluation's criterion rows, replaced as a whole."""

from __future__ import annotations

import duckdb

from strix_pipeline.records import CriterionResult
from strix_pipeline.warehouse.arrow import records_table
from strix_pipeline.warehouse.connection import WarehouseError, in_transaction, registered


def replace_decisions_from(con: duckdb.DuckDBPyConnection, source: str) -> int:
    """Store the evaluations a relation holds (an Arrow table registered on the connection, or
    ``read_parquet(...)``), replacing any stored rows of the same evaluation_ids; returns the rows
    written. Runs inside the caller's transaction."""
    con.execute(
        f"DELETE FROM decisions WHERE evaluation_id IN (SELECT DISTINCT evaluation_id FROM {source})"
    ).fetchall()
    return con.execute(f"INSERT INTO decisions BY NAME SELECT * FROM {source}").fetchall()[0][0]


def save_decision(con: duckdb.DuckDBPyConnection, rows: list[CriterionResult]) -> None:
    """Store one evaluation (all rows share its evaluation_id); saving it again replaces it."""
    if not rows:
        return
    ids = {r.evaluation_id for r in rows}
    if len(ids) != 1:
        raise WarehouseError(f"save_decision takes one evaluation per call, got {sorted(ids)}")
    data = records_table(CriterionResult, rows)
    with registered(con, "decisions", data) as name:
        in_transaction(con, lambda: replace_decisions_from(con, name))
