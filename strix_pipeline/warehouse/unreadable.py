"""The one rule for a reader's query that failed (the report's, the charts'): a part this warehouse does
not have (an older schema: a missing table or column) is shown as missing, but a warehouse that could
not be read at all (the sandbox refused a file, the file is damaged, memory ran out, the read was
interrupted) fails the reader, so nothing emptied is published over the last good site or charts."""

from __future__ import annotations

import duckdb

from strix_pipeline.warehouse.errors import WarehouseError

# DuckDB's errors that say the warehouse, not this report's question, is the trouble
_UNREADABLE = (
    duckdb.PermissionException,
    duckdb.IOException,
    duckdb.OutOfMemoryException,
    duckdb.InterruptException,
    duckdb.InternalException,
    duckdb.FatalException,
)


class WarehouseUnreadable(WarehouseError):
    """A reader could not read the warehouse; nothing was written."""


def refuse_unreadable(e: BaseException) -> None:
    """Raise :class:`WarehouseUnreadable` for an error that means the warehouse could not be read (one
    raised deeper, by a chart's query inside the report, passes on as it is)."""
    if isinstance(e, WarehouseUnreadable):
        raise e
    if isinstance(e, _UNREADABLE):
        raise WarehouseUnreadable(f"could not read the warehouse, nothing was written: {e}") from e
