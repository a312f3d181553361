"""The DuckDB warehouse: versioned schema, idempotent per-run loads, and the doors people query through.

Two backends, one schema: a single DuckDB file (the default), or a DuckLake lakehouse several
processes and machines write at once (``[warehouse] backend = "ducklake"``: catalog in PostgreSQL,
Parquet data files in a shared directory; ``Warehouse.open(config.warehouse_target())``).

One module per concern; :class:`Warehouse` (``facade.py``) is the object callers hold:

- ``connection.py``: opening the file or the lake, lock retries, transactions, inserts
- ``sandbox.py``: the query sandbox (locked settings; a lake's private read-only catalog copy)
- ``errors.py``, ``extensions.py``: the package's errors; the DuckLake extension files
- ``schema.py``: migrations and views, shipped as package data in ``sql/``
- ``arrow.py``: records and :class:`~strix_pipeline.records.RequestTable` to Arrow
- ``runs.py``: run loads (one transaction per load, a reload replaces the run) and deletes
- ``hosts.py``, ``images.py``, ``decisions.py``, ``changes.py``: one table (or two) each
- ``parquet.py``: export and import
- ``faults.py``: a full disk, a damaged file or a lock, said in words (:func:`~faults.explain`)
- ``spool.py``: a run's records written to a file before the warehouse is opened, loaded from there

SQL typed by a person (``strix query``) runs on a *sandboxed* reader (``sandbox=True``): read-only, and
DuckDB's own settings keep it inside the warehouse file -- no external access (no COPY to or from
files, no read_csv/read_text/read_parquet/glob of other files, no ATTACH of another file, no INSTALL
or LOAD of extension files), no spill directory, and the configuration locked so no SET or RESET gives
any of it back. Export and import, and the pipeline's own readers, open without it.
"""

from strix_pipeline.config import DuckLakeTarget
from strix_pipeline.warehouse.arrow import arrow_schema, records_table, request_table_arrow
from strix_pipeline.warehouse.changes import CHANGE_COLUMNS, ChangeRecord
from strix_pipeline.warehouse.connection import (
    COMMIT_RETRY,
    SANDBOX_CONFIG,
    CommitConflict,
    CommitRetry,
    WarehouseError,
    WarehouseLocked,
    WarehouseMissing,
    default_warehouse_path,
)
from strix_pipeline.warehouse.facade import Warehouse
from strix_pipeline.warehouse.faults import WarehouseCorrupt, WarehouseDiskFull, WarehouseTooNew
from strix_pipeline.warehouse.runs import RUN_TABLES
from strix_pipeline.warehouse.schema import (
    RECORD_TABLES,
    Migration,
    SchemaTooNew,
    current_schema_version,
    migrations,
    views_sql,
)

__all__ = [
    "CHANGE_COLUMNS",
    "COMMIT_RETRY",
    "RECORD_TABLES",
    "RUN_TABLES",
    "SANDBOX_CONFIG",
    "ChangeRecord",
    "CommitConflict",
    "CommitRetry",
    "DuckLakeTarget",
    "Migration",
    "SchemaTooNew",
    "Warehouse",
    "WarehouseCorrupt",
    "WarehouseTooNew",
    "WarehouseDiskFull",
    "WarehouseError",
    "WarehouseLocked",
    "WarehouseMissing",
    "arrow_schema",
    "current_schema_version",
    "default_warehouse_path",
    "migrations",
    "records_table",
    "request_table_arrow",
    "views_sql",
]
