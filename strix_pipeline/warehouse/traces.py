"""Imported traces (table ``traces``): what `strix workload import` checked and stored, one row per name.

:class:`TraceRecord` is the table's columns, in order. The requests are not here but in the normalised
file whose digest the row keeps (traces/store.py); this module only stores and reads the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from strix_pipeline.records import column_names
from strix_pipeline.warehouse.arrow import records_table
from strix_pipeline.warehouse.connection import in_transaction, insert


@dataclass
class TraceRecord:
    name: str
    imported_at: datetime
    format: str
    source_file: str  # the imported file's name (no folder: it may name a person's home)
    source_digest: str
    content_digest: str
    requests: int
    lengths_estimated: bool
    input_p50: float
    input_p90: float
    input_p99: float
    input_max: int
    output_p50: float
    output_p90: float
    output_p99: float
    output_max: int
    span_s: float | None
    rate_per_s: float | None
    concurrency_mean: float | None
    concurrency_peak: int | None
    prefix_reuse: float


TRACE_COLUMNS = column_names(TraceRecord)


def save_trace(con: duckdb.DuckDBPyConnection, row: TraceRecord) -> None:
    """Store an import; importing the name again replaces its row."""
    data = records_table(TraceRecord, [row])

    def write() -> None:
        con.execute("DELETE FROM traces WHERE name = ?", [row.name]).fetchall()
        insert(con, "traces", data)

    in_transaction(con, write)


def list_traces(con: duckdb.DuckDBPyConnection) -> list[TraceRecord]:
    sql = f"SELECT {', '.join(TRACE_COLUMNS)} FROM traces ORDER BY name"
    return [TraceRecord(*row) for row in con.execute(sql).fetchall()]
