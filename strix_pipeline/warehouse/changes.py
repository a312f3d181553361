"""Change points (table ``changes``): stored by a stable id, so an acknowledgement survives re-detection.

:class:`ChangeRecord`'s fields are the table's columns, in order: the one list of them
(:data:`CHANGE_COLUMNS` and the Arrow schema are derived from it). The analysis's
:class:`strix_pipeline.analysis.changepoints.Change` extends it with what is not stored.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

from strix_pipeline.records import column_names
from strix_pipeline.warehouse.arrow import records_table
from strix_pipeline.warehouse.connection import WarehouseError, in_transaction, registered


@dataclass
class ChangeRecord:
    """One row of ``changes``. On save, an empty ``change_id`` is derived (:func:`change_id`), an empty
    ``ack_status`` becomes "active" and a missing ``detected_at`` the time of the save."""

    change_id: str
    fingerprint: str  # the series: run fingerprint + "/" + scenario
    engine: str
    host: str
    metric: str
    scenario: str
    level: int
    version_before: str | None
    version_after: str | None
    sort_key_after: str | None
    magnitude_pct: float | None
    pvalue: float | None
    status: str  # "provisional" | "confirmed"
    ack_status: str  # "active" | "acknowledged"
    ack_reason: str | None
    detected_at: datetime
    # schema v5: when the change was first found confirmed (None while provisional)
    confirmed_at: datetime | None = None
    # schema v8: why the host, not the engine, is suspected (None: not suspected); never alerted
    host_drift: str | None = None
    # schema v23: what the canary did in the same window, shown beside an engine change; still alerted
    canary_moved: str | None = None


CHANGE_COLUMNS: tuple[str, ...] = tuple(column_names(ChangeRecord))
_REQUIRED = ("fingerprint", "engine", "host", "metric", "scenario", "level", "status")
_ID_FIELDS = ("fingerprint", "host", "engine", "metric", "scenario", "level", "sort_key_after")
_KEPT_ON_RESAVE = ("change_id", "ack_status", "ack_reason")  # the acknowledgement outlives re-detection
# The allowed values, checked here for every backend (DuckLake has no CHECK constraints).
STATUSES = ("provisional", "confirmed")
ACK_STATUSES = ("active", "acknowledged")


def change_id(change: ChangeRecord) -> str:
    """A stable id for a change: the same change found again keeps its id (and its acknowledgement)."""
    key = "|".join(str(getattr(change, k) or "") for k in _ID_FIELDS)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def save_changes(con: duckdb.DuckDBPyConnection, changes: list[ChangeRecord]) -> None:
    """Insert or refresh change points by change_id; an acknowledgement already given is kept.

    Takes any :class:`ChangeRecord` (also the analysis's subclass); only the columns are stored.
    """
    if not changes:
        return
    by_id: dict[str, ChangeRecord] = {}
    for c in changes:
        missing = [k for k in _REQUIRED if getattr(c, k) is None]
        if missing:
            raise WarehouseError(f"change row: missing {missing}: {c!r}")
        row = ChangeRecord(**{k: getattr(c, k) for k in CHANGE_COLUMNS})
        row = dataclasses.replace(
            row,
            change_id=row.change_id or change_id(row),
            ack_status=row.ack_status or "active",
            detected_at=row.detected_at or datetime.now(UTC),
        )
        if row.status not in STATUSES or row.ack_status not in ACK_STATUSES:
            raise WarehouseError(
                f"change row {row.change_id}: status must be one of {STATUSES} (got {row.status!r}) and "
                f"ack_status one of {ACK_STATUSES} (got {row.ack_status!r})"
            )
        by_id[row.change_id] = row
    data = records_table(ChangeRecord, list(by_id.values()))
    updates = ", ".join(f"{c} = s.{c}" for c in CHANGE_COLUMNS if c not in _KEPT_ON_RESAVE)
    with registered(con, "changes", data) as name:
        sql = (
            f"MERGE INTO changes USING (SELECT * FROM {name}) AS s ON changes.change_id = s.change_id "
            f"WHEN MATCHED THEN UPDATE SET {updates} WHEN NOT MATCHED THEN INSERT BY NAME"
        )
        in_transaction(con, lambda: con.execute(sql).fetchall())


def list_changes(
    con: duckdb.DuckDBPyConnection,
    *,
    host: str | None = None,
    engine: str | None = None,
    status: str | None = None,
    ack_status: str | None = None,
    fingerprint: str | None = None,
    metric: str | None = None,
) -> list[ChangeRecord]:
    """Change points, newest first, filtered by any of the given fields."""
    where, params = [], []
    for col, val in (
        ("host", host),
        ("engine", engine),
        ("status", status),
        ("ack_status", ack_status),
        ("fingerprint", fingerprint),
        ("metric", metric),
    ):
        if val is not None:
            where.append(f"{col} = ?")
            params.append(val)
    sql = f"SELECT {', '.join(CHANGE_COLUMNS)} FROM changes"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY detected_at DESC, change_id"
    return [ChangeRecord(*r) for r in con.execute(sql, params).fetchall()]


def ack_change(con: duckdb.DuckDBPyConnection, change_id: str, reason: str) -> bool:
    """Acknowledge a change (it stays, marked); False when no such change exists."""
    # The UPDATE's own row count (DuckLake has no UPDATE ... RETURNING).
    rows = in_transaction(
        con,
        lambda: con.execute(
            "UPDATE changes SET ack_status = 'acknowledged', ack_reason = ? WHERE change_id = ?",
            [reason, change_id],
        ).fetchall(),
    )
    return bool(rows and rows[0][0])
