"""The DuckDB warehouse: versioned schema, idempotent per-run loads, and the doors people query through.

Two backends, one schema: a single DuckDB file (the default), or a DuckLake lakehouse several
processes and machines write at once (``[warehouse] backend = "ducklake"``). One module per concern;
:class:`Warehouse` (``facade.py``) is the object callers hold, and this face only re-exports. SQL typed
by a person (``strix query``) runs on a sandboxed reader (``sandbox.py``). The modules and the
sandbox's rules: docs/warehouse.md ("The code").
"""

from strix_pipeline.config import DuckLakeTarget
from strix_pipeline.warehouse.arrow import arrow_schema, records_table, request_table_arrow
from strix_pipeline.warehouse.bisections import BisectionRecord, BisectionStep
from strix_pipeline.warehouse.changes import CHANGE_COLUMNS, ChangeRecord
from strix_pipeline.warehouse.comparisons import ComparisonRecord, ComparisonRun
from strix_pipeline.warehouse.connection import (
    COMMIT_RETRY,
    SANDBOX_CONFIG,
    CommitConflict,
    CommitRetry,
    WarehouseError,
    WarehouseLocked,
    WarehouseMissing,
)
from strix_pipeline.warehouse.facade import Warehouse
from strix_pipeline.warehouse.faults import WarehouseCorrupt, WarehouseDiskFull, WarehouseTooNew
from strix_pipeline.warehouse.noise import NoiseRecord
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
    "BisectionRecord",
    "BisectionStep",
    "ChangeRecord",
    "CommitConflict",
    "ComparisonRecord",
    "ComparisonRun",
    "CommitRetry",
    "DuckLakeTarget",
    "Migration",
    "NoiseRecord",
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
    "migrations",
    "records_table",
    "request_table_arrow",
    "views_sql",
]
