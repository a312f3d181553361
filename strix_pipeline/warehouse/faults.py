"""What went wrong with the warehouse file, in words: a full disk, a damaged file, or something else.

DuckDB reports all of these as ``IOException`` / ``TransactionException`` / ``SerializationException``
with its own wording; :func:`explain` turns one into a :class:`WarehouseError` subclass whose message
names the file, what is wrong and what to do. Nothing here touches the file: a damaged warehouse is
reported and left byte for byte as it was (no repair, no rename, no new file in its place).

What counts as detected: DuckDB checks the header and the catalog at open, and the checksum of every
block it reads. So garbage, a file cut short and damage to anything a load reads (the catalog, the
runs table it looks up) fail before anything is written. Damage in blocks no load reads (old rows of
a large table) is not noticed by a load, which then appends its new blocks beside the damaged ones
(leaving those as they are); a full read -- ``strix export --parquet`` -- finds it.
"""

from __future__ import annotations

import errno
from pathlib import Path

from strix_pipeline.warehouse.connection import is_lock_error
from strix_pipeline.warehouse.errors import WarehouseError, WarehouseLocked, WarehouseUnavailable


class WarehouseDiskFull(WarehouseUnavailable):
    """The disk holding the warehouse (or its write-ahead log) has no space left."""


class WarehouseCorrupt(WarehouseUnavailable):
    """The file is not a DuckDB database, or parts of it cannot be read back (damaged, truncated)."""


class WarehouseTooNew(WarehouseUnavailable):
    """The file was written by a newer DuckDB than this pipeline's (e.g. 2.x before the move to 1.5 for
    the DuckLake extensions): DuckDB cannot open a newer storage version, so it is left as it is."""

    fix = (
        "export it with the DuckDB that wrote it (the release before the change: `strix export "
        "--parquet DIR`), "
        "then `strix import --parquet DIR` here; or move it aside so a new warehouse is created"
    )


_TOO_NEW_MARKER = "Trying to read a database file with version number"

# DuckDB's wording for a file it cannot make sense of (2.0: a header that is not DuckDB's, a file cut
# short, a block whose checksum does not match, a catalog entry that does not deserialise).
_CORRUPT_MARKERS = (
    "not a valid DuckDB database file",
    "Could not read enough bytes",
    "Corrupt database file",
    "checksum",
    "Failed to deserialize",
    "Serialization Error",
)


def _disk_full(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(e) or "Disk quota exceeded" in str(e)


def explain(path: Path, e: BaseException, doing: str) -> WarehouseError:
    """The :class:`WarehouseError` to raise for ``e``, which happened while ``doing`` (e.g. "opening it")."""
    if isinstance(e, WarehouseError):
        return e
    text = str(e)
    if _disk_full(e):
        return WarehouseDiskFull(
            f"{path}: the disk holding the warehouse is full ({doing}: {text}); nothing was written -- "
            f"free space on that disk and load again"
        )
    if _TOO_NEW_MARKER in text:
        import duckdb

        return WarehouseTooNew(
            f"{path}: the warehouse file was written by a newer DuckDB than this pipeline's "
            f"{duckdb.__version__} ({doing}: {text}); it is left exactly as it is -- {WarehouseTooNew.fix}"
        )
    if any(m in text for m in _CORRUPT_MARKERS):
        return WarehouseCorrupt(
            f"{path}: the warehouse file is damaged or not a DuckDB database ({doing}: {text}); it is left "
            f"exactly as it is -- restore it from a backup (or `strix export`), or move it aside so a "
            f"new warehouse is created"
        )
    if is_lock_error(e if isinstance(e, Exception) else Exception(text)):
        return WarehouseLocked(f"{path}: another process has the warehouse open ({doing}: {text})")
    return WarehouseError(f"{path}: {doing}: {type(e).__name__}: {text}")
