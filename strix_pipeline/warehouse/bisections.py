"""Bisections (tables ``bisections`` and ``bisection_steps``): the search for the release that made a change.

:class:`BisectionRecord` and :class:`BisectionStep` are the tables' columns, in order. A bisection is
saved whole after every step (one row per id, replaced), its steps appended; analysis/bisect/ holds
the search itself, this module only stores and reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from strix_pipeline.records import column_names
from strix_pipeline.warehouse.arrow import records_table
from strix_pipeline.warehouse.connection import WarehouseError, in_transaction, insert

# The allowed values, checked here for every backend (DuckLake has no CHECK constraints).
BISECTION_STATUSES = ("running", "found", "inconclusive", "exhausted", "nothing_between", "drift")
STEP_SIDES = ("before", "after", "inconclusive", "skipped")


@dataclass
class BisectionRecord:
    """One row of ``bisections``; ``candidates`` is a JSON list of ``{"version", "key"}``."""

    bisection_id: str
    change_id: str | None
    host: str
    engine: str
    fingerprint: str
    metric: str
    scenario: str
    level: int
    version_before: str
    version_after: str
    candidates: str
    status: str
    first_release: str | None
    last_without: str | None
    next_key: str | None
    runs_used: int
    max_runs: int
    reason: str | None
    started_at: datetime
    updated_at: datetime


@dataclass
class BisectionStep:
    """One row of ``bisection_steps``: one release benchmarked, its figure and the side it fell on."""

    bisection_id: str
    step: int
    version: str
    partition_key: str
    run_id: str | None
    value: float | None
    low: float | None
    high: float | None
    side: str
    note: str | None
    decided_at: datetime


BISECTION_COLUMNS: tuple[str, ...] = tuple(column_names(BisectionRecord))
STEP_COLUMNS: tuple[str, ...] = tuple(column_names(BisectionStep))


def save_bisection(
    con: duckdb.DuckDBPyConnection, bisection: BisectionRecord, new_steps: list[BisectionStep] = ()
) -> None:
    """Replace the bisection's row and append ``new_steps``, in one transaction."""
    if bisection.status not in BISECTION_STATUSES:
        raise WarehouseError(
            f"bisection {bisection.bisection_id}: status must be one of {BISECTION_STATUSES} "
            f"(got {bisection.status!r})"
        )
    for s in new_steps:
        if s.side not in STEP_SIDES or s.bisection_id != bisection.bisection_id:
            raise WarehouseError(
                f"bisection step {s.bisection_id}#{s.step}: side must be one of {STEP_SIDES} (got {s.side!r})"
            )
    row = records_table(BisectionRecord, [bisection])
    steps = records_table(BisectionStep, list(new_steps)) if new_steps else None

    def work() -> None:
        con.execute("DELETE FROM bisections WHERE bisection_id = ?", [bisection.bisection_id]).fetchall()
        insert(con, "bisections", row)
        if steps is not None:
            insert(con, "bisection_steps", steps)

    in_transaction(con, work)


def list_bisections(con: duckdb.DuckDBPyConnection, *, status: str | None = None) -> list[BisectionRecord]:
    """Bisections, newest first (optionally of one status)."""
    sql = f"SELECT {', '.join(BISECTION_COLUMNS)} FROM bisections"
    params: list[str] = []
    if status is not None:
        sql += " WHERE status = ?"
        params.append(status)
    sql += " ORDER BY started_at DESC, bisection_id"
    return [BisectionRecord(*r) for r in con.execute(sql, params).fetchall()]


def bisection_steps(con: duckdb.DuckDBPyConnection, bisection_id: str) -> list[BisectionStep]:
    sql = f"SELECT {', '.join(STEP_COLUMNS)} FROM bisection_steps WHERE bisection_id = ? ORDER BY step"
    return [BisectionStep(*r) for r in con.execute(sql, [bisection_id]).fetchall()]
