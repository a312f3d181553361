"""Reads of a Box's production as deployed (table ``production_reads``): one row per read, so a later
read with another digest says that production changed, and since when the last one held."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from strix_pipeline.records import column_names
from strix_pipeline.warehouse.arrow import records_table
from strix_pipeline.warehouse.connection import in_transaction, insert


@dataclass
class ProductionReadRecord:
    host: str
    read_at: datetime
    digest: str  # ProductionRead.digest
    content: str  # ProductionRead.to_json(): what was read


COLUMNS = column_names(ProductionReadRecord)


def save_read(con: duckdb.DuckDBPyConnection, row: ProductionReadRecord) -> None:
    data = records_table(ProductionReadRecord, [row])
    in_transaction(con, lambda: insert(con, "production_reads", data))


def last_read(con: duckdb.DuckDBPyConnection, host: str) -> ProductionReadRecord | None:
    sql = f"SELECT {', '.join(COLUMNS)} FROM production_reads WHERE host = ? ORDER BY read_at DESC LIMIT 1"
    row = con.execute(sql, [host]).fetchone()
    return ProductionReadRecord(*row) if row else None
