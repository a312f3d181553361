"""The one rule for a report query that failed: a part this warehouse does not have (an older schema: a
missing table or column) is shown as missing, but a warehouse that could not be read at all (the
sandbox refused a file, the file is damaged, memory ran out, the read was interrupted) fails the
report, so nothing emptied is published over the last good site."""

from __future__ import annotations

import duckdb

from strix_pipeline.warehouse import WarehouseError

# DuckDB's errors that say the warehouse, not this report's question, is the trouble
_UNREADABLE = (
    duckdb.PermissionException,
    duckdb.IOException,
    duckdb.OutOfMemoryException,
    duckdb.InterruptException,
    duckdb.InternalException,
    duckdb.FatalException,
)


class ReportUnreadable(WarehouseError):
    """The report could not read the warehouse; nothing was written."""


def refuse_unreadable(e: BaseException) -> None:
    """Raise :class:`ReportUnreadable` for an error that means the warehouse could not be read."""
    if isinstance(e, _UNREADABLE):
        raise ReportUnreadable(f"could not read the warehouse, nothing was written: {e}") from e
