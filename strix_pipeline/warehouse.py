"""The DuckDB warehouse: versioned schema, idempotent per-run loads, and the doors people query through.

Concurrency (DuckDB >= 1.x, one file): one *process* may open the file for writing, and while it has
it open no other process may open it at all, not even read-only; several processes may open it
read-only together. So writers here open, write one short transaction and close
(``with Warehouse.open(path) as wh: wh.load_run(result)``), never holding the file through a
benchmark; readers open ``read_only=True``. Both retry for ``lock_retry_s`` on the lock error and then
raise :class:`WarehouseLocked` naming the process DuckDB says holds it.

SQL typed by a person (``strix query``) runs on a *sandboxed* reader (``sandbox=True``): read-only, and
DuckDB's own settings keep it inside the warehouse file -- no external access (no COPY to or from
files, no read_csv/read_text/read_parquet/glob of other files, no ATTACH of another file, no INSTALL
or LOAD of extension files), no spill directory, and the configuration locked so no SET or RESET gives
any of it back. Export and import, and the pipeline's own readers, open without it.

Schema: ``warehouse/migrations/NNNN_name.sql`` applied in order in one transaction when a writer opens
an older file; ``warehouse/views.sql`` re-installed whenever its content changes. A file newer than
this code is refused (:class:`SchemaTooNew`) rather than half-understood.

Loads: each record list becomes an Arrow table with an explicit schema derived from the dataclass
(see :func:`arrow_schema`), and DuckDB scans it (``INSERT ... BY NAME SELECT * FROM arrow``), so a
run of thousands of requests is a handful of vectorised inserts, not a row-by-row loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import itertools
import json
import operator
import re
import time
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from strix_pipeline.config import REPO_ROOT, load_config
from strix_pipeline.fingerprint import run_fingerprint
from strix_pipeline.records import (
    REQUEST_COLUMN_KINDS,
    REQUEST_SCALAR_FIELDS,
    CriterionResult,
    ImageRecord,
    LevelAggregate,
    MemorySample,
    RequestRecord,
    RequestTable,
    RunRecord,
    RunResult,
    ServerMetricSample,
    column_names,
)

SCHEMA_DIR = REPO_ROOT / "warehouse"
MIGRATIONS_DIR = SCHEMA_DIR / "migrations"
VIEWS_FILE = SCHEMA_DIR / "views.sql"

# Tables holding one run's rows, in load order (runs first, so a reader joining on runs never sees
# orphans; all of it is one transaction anyway).
RUN_TABLES: dict[str, type] = {
    "runs": RunRecord,
    "requests": RequestRecord,
    "aggregates": LevelAggregate,
    "memory_samples": MemorySample,
    "server_metrics": ServerMetricSample,
}
RECORD_TABLES: dict[str, type] = {**RUN_TABLES, "images": ImageRecord, "decisions": CriterionResult}

CHANGE_COLUMNS = (
    "change_id",
    "fingerprint",
    "engine",
    "host",
    "metric",
    "scenario",
    "level",
    "version_before",
    "version_after",
    "sort_key_after",
    "magnitude_pct",
    "pvalue",
    "status",
    "ack_status",
    "ack_reason",
    "detected_at",
)
_CHANGE_SCHEMA = pa.schema(
    [
        ("change_id", pa.string()),
        ("fingerprint", pa.string()),
        ("engine", pa.string()),
        ("host", pa.string()),
        ("metric", pa.string()),
        ("scenario", pa.string()),
        ("level", pa.int64()),
        ("version_before", pa.string()),
        ("version_after", pa.string()),
        ("sort_key_after", pa.string()),
        ("magnitude_pct", pa.float64()),
        ("pvalue", pa.float64()),
        ("status", pa.string()),
        ("ack_status", pa.string()),
        ("ack_reason", pa.string()),
        ("detected_at", pa.timestamp("us", tz="UTC")),
    ]
)


class WarehouseError(RuntimeError):
    """The warehouse cannot do what was asked; the message says why and what to do."""


class WarehouseLocked(WarehouseError):
    """Another process holds the file (DuckDB allows one writer process, and no reader beside it)."""


class WarehouseMissing(WarehouseError):
    """A read-only open of a file that does not exist."""


class SchemaTooNew(WarehouseError):
    """The file was written by a newer strix-pipeline; this code will not guess at its schema."""


# --------------------------------------------------------------------------------------------------
# Schema files


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


_MIGRATION_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def migrations(directory: Path | None = None) -> list[Migration]:
    """The forward migrations, in order; numbering must be 1..N without gaps."""
    directory = directory or MIGRATIONS_DIR
    found = []
    for p in sorted(directory.glob("*.sql")):
        m = _MIGRATION_RE.match(p.name)
        if not m:
            raise WarehouseError(f"{p}: migration files are named NNNN_lower_snake.sql")
        found.append(Migration(int(m.group(1)), m.group(2), p.read_text()))
    for i, m in enumerate(found, start=1):
        if m.version != i:
            raise WarehouseError(
                f"{directory}: migration {i:04d} is missing (found {m.version:04d}_{m.name})"
            )
    return found


def current_schema_version() -> int:
    return len(migrations())


def views_sql() -> str:
    return VIEWS_FILE.read_text()


# --------------------------------------------------------------------------------------------------
# Records -> Arrow


def _arrow_type(hint: Any) -> pa.DataType:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {hint!r}")
        return _arrow_type(args[0])
    if origin is list:
        (item,) = typing.get_args(hint)
        return pa.list_(_arrow_type(item))
    simple = {
        str: pa.string(),
        int: pa.int64(),
        float: pa.float64(),
        bool: pa.bool_(),
        datetime: pa.timestamp("us", tz="UTC"),
    }
    if hint in simple:
        return simple[hint]
    raise TypeError(f"no Arrow type for {hint!r}")


_SCHEMAS: dict[type, pa.Schema] = {}


def arrow_schema(cls: type) -> pa.Schema:
    """The explicit Arrow schema of a record dataclass: field order and types, nothing inferred."""
    if cls not in _SCHEMAS:
        hints = typing.get_type_hints(cls)
        _SCHEMAS[cls] = pa.schema([(f.name, _arrow_type(hints[f.name])) for f in dataclasses.fields(cls)])
    return _SCHEMAS[cls]


def records_table(cls: type, rows: Sequence[Any]) -> pa.Table:
    """Build an Arrow table from dataclass instances with the explicit schema of :func:`arrow_schema`.

    This conversion, not DuckDB, bounds ingestion speed on a small machine, so Arrow reads the fields
    straight from each instance's ``__dict__`` as a struct (C++, no per-column Python lists). Measured
    on 124k request rows against the alternatives (per-column ``pa.array`` over ``itemgetter`` /
    ``attrgetter`` lists, ``Table.from_pylist``, flattened ``ListArray.from_arrays`` for the list
    columns, an epoch-arithmetic path for the timestamps): none was faster by more than the noise,
    most were slower. The type check is one C-level pass, and the cyclic GC is paused meanwhile (see
    :func:`_gc_paused`).
    """
    schema = arrow_schema(cls)
    if not rows:
        return schema.empty_table()
    kinds = set(map(type, rows))
    if kinds != {cls}:
        other = next(k for k in kinds if k is not cls)
        raise TypeError(f"expected {cls.__name__}, got {other.__name__}")
    with _gc_paused():
        try:
            struct = pa.array(list(map(_INSTANCE_DICT, rows)), type=pa.struct(list(schema)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            raise WarehouseError(f"{cls.__name__}: a value does not fit the schema: {e}") from e
    return pa.Table.from_struct_array(struct)


def request_table_arrow(tables: RequestTable | Sequence[RequestTable]) -> pa.Table:
    """The requests of one or more :class:`RequestTable` as ONE Arrow table with the explicit schema.

    Never row by row in Python: Arrow reads the scalar tuples as one struct array (C++); the typed
    arrays of all tables are joined into one bytes object that becomes the Arrow buffer as is; list
    offsets are the tables' end offsets shifted by what came before. One contiguous table rather
    than one chunk per run, because DuckDB scans many small chunks slower.
    """
    tables = [tables] if isinstance(tables, RequestTable) else list(tables)
    n = sum(map(len, tables))
    schema = arrow_schema(RequestRecord)
    scalars = _scalar_columns(list(itertools.chain.from_iterable(t.scalar_rows() for t in tables)))
    arrays: list[pa.Array] = []
    for f in schema:
        kind = REQUEST_COLUMN_KINDS[f.name]
        if kind == "scalar":
            arrays.append(scalars[f.name])
        elif kind == "timestamp":
            data = b"".join(t.times_us() for t in tables)
            arrays.append(pa.Array.from_buffers(f.type, n, [None, pa.py_buffer(data)]))
        else:
            parts = [t.list_column(f.name) for t in tables]
            values = b"".join(v for v, _ in parts)
            flat = pa.Array.from_buffers(
                f.type.value_type, len(values) // f.type.value_type.byte_width, [None, pa.py_buffer(values)]
            )
            offsets, base = [pa.array([0], type=pa.int64())], 0
            for v, ends in parts:
                own = pa.Array.from_buffers(pa.int64(), len(ends), [None, pa.py_buffer(ends.tobytes())])
                offsets.append(pc.add(own, base) if base else own)
                base += len(v)
            try:
                offsets_32 = pa.concat_arrays(offsets).cast(pa.int32())  # safe cast: refuses an overflow
            except pa.ArrowInvalid as e:
                raise WarehouseError(
                    f"RequestRecord.{f.name}: {base:,} values in one load exceed a list column's 2^31; "
                    "load fewer runs per transaction"
                ) from e
            lists = pa.ListArray.from_arrays(offsets_32, flat)
            lists.validate(full=True)  # offsets in order and in bounds, before DuckDB reads through them
            arrays.append(lists)
    return pa.Table.from_arrays(arrays, schema=schema)


def _scalar_columns(rows: list[tuple[Any, ...]]) -> dict[str, pa.Array]:
    schema = arrow_schema(RequestRecord)
    fields = [schema.field(name) for name in REQUEST_SCALAR_FIELDS]
    try:
        struct = pa.array(rows, type=pa.struct(fields))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as e:
        # Find the column to name (the slow way; only on the error path).
        for k, f in enumerate(fields):
            try:
                pa.array([row[k] for row in rows], type=f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as col_e:
                raise WarehouseError(f"RequestRecord.{f.name}: a value does not fit {f.type}: {col_e}") from e
        raise WarehouseError(f"RequestRecord: a value does not fit the schema: {e}") from e
    return {f.name: struct.field(k) for k, f in enumerate(fields)}


def _requests_table(results: Sequence[RunResult]) -> pa.Table:
    """The requests of every run in a load; runs that hand over a plain list take the row path."""
    columnar: list[RequestTable] = []
    parts: list[pa.Table] = []
    for res in results:
        rows = res.requests
        if isinstance(rows, RequestTable):
            _check_run_ids(res.run.run_id, RequestRecord, rows.run_ids())
            columnar.append(rows)
        else:
            _check_run_ids(res.run.run_id, RequestRecord, list(map(_RUN_ID, rows)))
            parts.append(records_table(RequestRecord, rows))
    if columnar:
        parts.append(request_table_arrow(columnar))
    return pa.concat_tables(parts) if parts else arrow_schema(RequestRecord).empty_table()


_INSTANCE_DICT = operator.attrgetter("__dict__")
_RUN_ID = operator.attrgetter("run_id")


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC (re-entrant; restores the previous state).

    A load allocates nothing cyclic, but it allocates enough that CPython starts collections, and in a
    process holding millions of record objects (a backfill, the scale benchmark) a full collection
    costs ~0.3 s: measured at ~2.5 us per request row of a 124k-row load when only the Arrow
    conversion itself was covered.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def records_frame(cls: type, rows: Sequence[Any]) -> pl.DataFrame:
    """The same records as a polars DataFrame with the explicit schema (zero-copy over Arrow)."""
    return typing.cast(pl.DataFrame, pl.from_arrow(records_table(cls, rows)))


# --------------------------------------------------------------------------------------------------
# The warehouse


def _is_lock_error(e: Exception) -> bool:
    msg = str(e)
    return "Could not set lock" in msg or "Conflicting lock" in msg or "lock on file" in msg


# DuckDB settings of a sandboxed reader, given when the database instance is created (DuckDB shares one
# instance per file and process, so they can neither leak to nor be missing from another connection:
# an open with other settings is refused as "different configuration"). enable_external_access=false
# refuses every file but the database's own and its spill directory, so the spill directory is turned
# off (temp_directory=''): a query then has to fit in memory_limit (80% of RAM by default) instead of
# being able to COPY into <warehouse>.tmp/. Extensions are neither fetched nor loaded on demand; those
# built into the wheel (parquet, json, icu) work as before. lock_configuration is set after TimeZone.
SANDBOX_CONFIG: dict[str, str | bool] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "temp_directory": "",
}


def _connect(
    path: Path,
    read_only: bool,
    lock_retry_s: float,
    on_wait: Callable[[str], None] | None = None,
    config: dict[str, str | bool] | None = None,
) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + max(0.0, lock_retry_s)
    delay = 0.05
    told = False
    while True:
        try:
            if config is not None:
                return duckdb.connect(str(path), read_only=read_only, config=dict(config))
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as e:
            if not _is_lock_error(e):
                raise WarehouseError(f"{path}: cannot open the warehouse: {e}") from e
            if time.monotonic() >= deadline:
                holder = re.search(r"Conflicting lock is held in (.*?)(?:\. See also|$)", str(e))
                who = f" ({holder.group(1)})" if holder else ""
                raise WarehouseLocked(
                    f"{path}: another process{who} has the warehouse open, and DuckDB lets no other process "
                    f"open it while a writer holds it; waited {lock_retry_s:g}s. A benchmark run is probably "
                    f"loading its results: try again in a moment."
                ) from e
        except duckdb.ConnectionException as e:
            # The same process already holds the file with the other mode (DuckDB shares one database
            # instance per file and process). Another thread may be about to close it: wait as for a lock.
            if "different configuration" not in str(e):
                raise WarehouseError(f"{path}: cannot open the warehouse: {e}") from e
            if time.monotonic() >= deadline:
                mode = "read-only" if read_only else "writable"
                if config is not None:
                    mode += " and sandboxed"
                raise WarehouseLocked(
                    f"{path}: this process already has the warehouse open in the other mode, so it cannot "
                    f"also open it {mode} (waited {lock_retry_s:g}s); use the open Warehouse, or close it first"
                ) from e
        if on_wait is not None and not told:
            told = True
            on_wait(f"{path} is held by a writer; waiting up to {lock_retry_s:g}s")
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, 0.5)


def _connect_writer_settings(con: duckdb.DuckDBPyConnection) -> None:
    # Checkpoints of a writer do not vacuum: appends leave nothing to reclaim, and after every bulk
    # load the vacuum merged the load's partial last row group with the next load's rows and compressed
    # them again, ~1.4 CPU-us per request row. Deleted rows need it: Warehouse._reclaim turns it back on
    # for the loads that delete. A DuckDB without the setting just keeps vacuuming: slower, nothing lost.
    with contextlib.suppress(duckdb.Error):
        con.execute("SET max_vacuum_tasks = 0").fetchall()


def _lock_sandbox(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    locked = con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]
    if locked:
        # Another sandboxed reader of this process already locked the shared instance; this connection
        # could not set its TimeZone (a per-connection value), so its times would be in the wrong zone.
        raise WarehouseLocked(
            f"{path}: this process already has a sandboxed reader of the warehouse open; close it first"
        )
    con.execute("SET TimeZone = 'UTC'").fetchall()
    con.execute("SET lock_configuration = true").fetchall()
    got = con.execute(
        "SELECT current_setting('enable_external_access'), current_setting('lock_configuration')"
    ).fetchall()[0]
    if got != (False, True):  # a DuckDB that ignored a setting must not run the query at all
        raise WarehouseError(f"{path}: DuckDB did not apply the query sandbox settings: {got}")


def default_warehouse_path(config: str | Path | None = None) -> Path:
    """Where the configuration puts the warehouse (``project.warehouse``, default warehouse/strix.duckdb)."""
    return load_config(config).warehouse_path()


class Warehouse:
    """One open warehouse file. Use as a context manager; writers should close promptly."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
        self.con = con
        self.path = path
        self.read_only = read_only
        self.schema_version = 0

    # ---- opening, schema ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        read_only: bool = False,
        lock_retry_s: float = 5.0,
        on_wait: Callable[[str], None] | None = None,
        sandbox: bool = False,
    ) -> Warehouse:
        """Open (and, when writable, create or migrate) the warehouse at ``path``.

        While another process holds the file, retry for ``lock_retry_s`` seconds (``on_wait`` is told
        once, e.g. to show "waiting for the writer"), then raise :class:`WarehouseLocked`.

        ``sandbox=True`` (only with ``read_only=True``) is for SQL that someone typed: the connection
        reads the warehouse file and nothing else, writes nothing, and cannot change its settings
        (:data:`SANDBOX_CONFIG`, then ``lock_configuration``). ``export_parquet`` does not work on it.
        One sandboxed reader per file and process at a time.
        """
        path = Path(path)
        if sandbox and not read_only:
            raise ValueError("sandbox=True is for read-only opens")
        if read_only and not path.exists():
            raise WarehouseMissing(
                f"{path}: no warehouse here yet; it is created by the first benchmark run that loads results"
            )
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        con = _connect(path, read_only, lock_retry_s, on_wait, SANDBOX_CONFIG if sandbox else None)
        wh = cls(con, path, read_only)
        try:
            if sandbox:
                _lock_sandbox(con, path)
            else:
                con.execute("SET TimeZone = 'UTC'").fetchall()
            if not read_only:
                _connect_writer_settings(con)
            wh._prepare_schema()
        except BaseException:
            con.close()
            raise
        return wh

    @classmethod
    def create_at_version(cls, path: str | Path, version: int) -> Warehouse:
        """A writable warehouse at an *older* schema version and without views: for migration tests."""
        path = Path(path)
        con = _connect(path, False, 0.0)
        wh = cls(con, path, False)
        con.execute("SET TimeZone = 'UTC'").fetchall()
        wh._apply(migrations()[:version], with_views=False)
        return wh

    def _stored_version(self) -> int:
        has = self.con.execute(
            "SELECT count(*) FROM duckdb_tables() "
            "WHERE database_name = current_database() AND schema_name = 'main' AND table_name = 'schema_version'"
        ).fetchall()
        if not has[0][0]:
            return 0
        rows = self.con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchall()
        return int(rows[0][0])

    def _prepare_schema(self) -> None:
        all_migrations = migrations()
        code_version = len(all_migrations)
        stored = self._stored_version()
        self.schema_version = stored
        if stored > code_version:
            raise SchemaTooNew(
                f"{self.path}: warehouse schema is v{stored}, newer than this strix-pipeline understands "
                f"(v{code_version}); upgrade strix-pipeline rather than risk misreading or damaging it"
            )
        if self.read_only:
            if stored < code_version:
                warnings.warn(
                    f"{self.path}: warehouse schema is v{stored}, this code expects v{code_version}; "
                    "it is migrated the next time a writer opens it (views may be missing until then)",
                    stacklevel=3,
                )
            return
        pending = all_migrations[stored:]
        if pending or self._views_outdated():
            self._apply(pending, with_views=True)

    def _views_outdated(self) -> bool:
        rows = self.con.execute("SELECT value FROM schema_meta WHERE key = 'views_sha256'").fetchall()
        return not rows or rows[0][0] != hashlib.sha256(views_sql().encode()).hexdigest()

    def _user_views(self) -> list[str]:
        rows = self.con.execute(
            "SELECT view_name FROM duckdb_views() "
            "WHERE database_name = current_database() AND schema_name = 'main' AND NOT internal"
        ).fetchall()
        return [r[0] for r in rows]

    def _apply(self, pending: list[Migration], *, with_views: bool) -> None:
        """Migrations and views in ONE transaction: a failure leaves the file exactly as it was."""
        con = self.con
        step = "dropping views"
        con.begin()
        try:
            # Views are derived: drop them so a migration can reshape the tables under them.
            for name in self._user_views():
                con.execute(f'DROP VIEW IF EXISTS "{name}"').fetchall()
            for m in pending:
                step = f"migration {m.version:04d}_{m.name}"
                con.execute(m.sql).fetchall()
                con.execute(
                    "INSERT INTO schema_version VALUES (?, ?, ?)", [m.version, m.name, datetime.now(UTC)]
                ).fetchall()
            if with_views:
                step = "views.sql"
                sql = views_sql()
                con.execute(sql).fetchall()
                con.execute(
                    "INSERT INTO schema_meta VALUES ('views_sha256', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [hashlib.sha256(sql.encode()).hexdigest()],
                ).fetchall()
            con.commit()
        except BaseException as e:
            con.rollback()
            if isinstance(e, duckdb.Error):
                raise WarehouseError(f"{self.path}: {step} failed, warehouse left unchanged: {e}") from e
            raise
        if pending:
            self.schema_version = pending[-1].version

    def close(self) -> None:
        try:
            self.con.close()
        except duckdb.Error:
            pass

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- helpers --------------------------------------------------------------------------------

    def _writable(self) -> None:
        if self.read_only:
            raise WarehouseError(f"{self.path}: opened read-only; open it writable to change it")

    def _insert(self, table: str, data: pa.Table, suffix: str = "") -> None:
        # One name per table: a registration is per connection and is dropped right after the insert.
        name = f"_strix_load_{table}"
        self.con.register(name, data)
        try:
            self.con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {name} {suffix}").fetchall()
        finally:
            try:
                self.con.unregister(name)
            except duckdb.Error:
                pass  # an aborted transaction refuses even this; the next register replaces the name

    def _transaction(self) -> _Tx:
        return _Tx(self.con)

    def table_names(self) -> list[str]:
        rows = self.con.execute(
            "SELECT table_name FROM duckdb_tables() "
            "WHERE database_name = current_database() AND schema_name = 'main' ORDER BY table_name"
        ).fetchall()
        return [r[0] for r in rows]

    def view_names(self) -> list[str]:
        return sorted(self._user_views())

    def count(self, table: str, run_id: str | None = None) -> int:
        if table not in self.table_names():
            raise WarehouseError(f"no table {table!r}")
        if run_id is None:
            rows = self.con.execute(f'SELECT count(*) FROM "{table}"').fetchall()
        else:
            rows = self.con.execute(f'SELECT count(*) FROM "{table}" WHERE run_id = ?', [run_id]).fetchall()
        return int(rows[0][0])

    def query_df(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pl.DataFrame:
        """Run a query and return its result as a polars DataFrame (empty for statements without rows)."""
        rel = self.con.sql(sql, params=params) if params is not None else self.con.sql(sql)
        if rel is None:
            return pl.DataFrame()
        return rel.pl()

    # ---- runs -----------------------------------------------------------------------------------

    def load_run(self, result: RunResult) -> None:
        """Load one run in one transaction, replacing any earlier load of the same run_id. All or nothing."""
        self.load_runs([result])

    def load_runs(self, results: Sequence[RunResult]) -> None:
        """Load several runs in ONE transaction (a backfill); each replaces its earlier load."""
        self._writable()
        if not results:
            return
        ids = [r.run.run_id for r in results]
        if len(set(ids)) != len(ids):
            raise WarehouseError("the same run_id appears twice in one load")
        # Conversion first, outside the transaction: a bad value fails before anything is touched.
        # The GC stays paused through the inserts as well (see _gc_paused).
        with _gc_paused():
            tables: dict[str, pa.Table] = {}
            for table, cls in RUN_TABLES.items():
                if table == "requests":
                    tables[table] = _requests_table(results)
                    continue
                rows: list[Any] = []
                for res in results:
                    part = (
                        [_with_fingerprint(res.run)]
                        if table == "runs"
                        else getattr(res, _RESULT_FIELD[table])
                    )
                    _check_run_ids(res.run.run_id, cls, list(map(_RUN_ID, part)))
                    rows.extend(part)
                tables[table] = records_table(cls, rows)
            with self._transaction():
                replaced = self._delete_runs(ids)
                for table, data in tables.items():
                    if data.num_rows:
                        self._insert(table, data)
                self._refresh_hosts(sorted({r.run.host for r in results}))
        if replaced:
            self._reclaim()

    def _delete_runs(self, run_ids: list[str]) -> bool:
        """Delete these runs' rows from every run table; True when any of them was there."""
        # Only runs present in `runs` can have rows elsewhere (every load is one transaction), so new
        # run ids skip the scans of the large tables.
        present = [
            r[0]
            for r in self.con.execute(
                "SELECT run_id FROM runs WHERE list_contains(?, run_id)", [run_ids]
            ).fetchall()
        ]
        if not present:
            return False
        for table in RUN_TABLES:
            self.con.execute(f"DELETE FROM {table} WHERE list_contains(?, run_id)", [present]).fetchall()
        return True

    def delete_run(self, run_id: str) -> None:
        """Remove a run from every table (one transaction)."""
        self._writable()
        with self._transaction():
            deleted = self._delete_runs([run_id])
        if deleted:
            self._reclaim()

    def _reclaim(self) -> None:
        """Checkpoint with DuckDB's default vacuuming, so the rows a reload or delete left behind give
        their space back (writers otherwise keep it off: see :func:`_connect_writer_settings`).

        If another connection of this process has a transaction open the checkpoint is refused; the
        space then waits for the next reload, and nothing is lost but disk.
        """
        with contextlib.suppress(duckdb.Error):
            self.con.execute("RESET max_vacuum_tasks").fetchall()
            self.con.execute("CHECKPOINT").fetchall()
        _connect_writer_settings(self.con)

    def run_ids(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT run_id FROM runs ORDER BY started_at").fetchall()]

    # ---- hosts ----------------------------------------------------------------------------------

    def upsert_host(self, name: str, kind: str | None, description: str | None) -> None:
        self._writable()
        now = datetime.now(UTC)
        self.con.execute(
            "INSERT INTO hosts (name, kind, description, first_seen, last_seen) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET kind = coalesce(excluded.kind, hosts.kind), "
            "description = coalesce(excluded.description, hosts.description), last_seen = excluded.last_seen",
            [name, kind, description, now, now],
        ).fetchall()

    def _refresh_hosts(self, hosts: list[str]) -> None:
        # One statement: first/last seen widen to cover the host's runs, and the host facts are those
        # of its newest run by started_at (so an old run loaded late does not overwrite them).
        self.con.execute(
            "INSERT INTO hosts (name, first_seen, last_seen, rocm_version, kernel, firmware, kernel_cmdline, "
            "ttm_pages_limit) "
            "SELECT host, min(started_at), max(started_at), arg_max_null(rocm_version, started_at), "
            "arg_max_null(kernel, started_at), arg_max_null(firmware, started_at), "
            "arg_max_null(kernel_cmdline, started_at), arg_max_null(ttm_pages_limit, started_at) "
            "FROM runs WHERE list_contains(?, host) GROUP BY host "
            "ON CONFLICT (name) DO UPDATE SET first_seen = least(hosts.first_seen, excluded.first_seen), "
            "last_seen = greatest(hosts.last_seen, excluded.last_seen), rocm_version = excluded.rocm_version, "
            "kernel = excluded.kernel, firmware = excluded.firmware, kernel_cmdline = excluded.kernel_cmdline, "
            "ttm_pages_limit = excluded.ttm_pages_limit",
            [hosts],
        ).fetchall()

    # ---- images ---------------------------------------------------------------------------------

    def upsert_images(self, images: list[ImageRecord]) -> None:
        """Insert or refresh images keyed by (registry, repository, tag); first_seen keeps its oldest value."""
        self._writable()
        if not images:
            return
        latest: dict[tuple[str, str, str], ImageRecord] = {}
        for img in images:  # last one wins: ON CONFLICT may not touch a row twice in one statement
            latest[(img.registry, img.repository, img.tag)] = img
        data = records_table(ImageRecord, list(latest.values()))
        updates = ", ".join(
            f"{c} = excluded.{c}"
            for c in column_names(ImageRecord)
            if c not in ("registry", "repository", "tag", "first_seen")
        )
        with self._transaction():
            self._insert(
                "images",
                data,
                "ON CONFLICT (registry, repository, tag) DO UPDATE SET "
                f"{updates}, first_seen = least(images.first_seen, excluded.first_seen)",
            )

    def known_images(self, engine: str | None = None) -> list[ImageRecord]:
        cols = ", ".join(column_names(ImageRecord))
        sql = f"SELECT {cols} FROM images"
        params: list[Any] = []
        if engine is not None:
            sql += " WHERE engine = ?"
            params.append(engine)
        sql += " ORDER BY engine, registry, repository, sort_key, tag"
        return [ImageRecord(*row) for row in self.con.execute(sql, params).fetchall()]

    def mark_images_gone(self, registry: str, repository: str, tags: list[str], at: datetime) -> None:
        self._writable()
        if not tags:
            return
        self.con.execute(
            "UPDATE images SET gone = true, gone_since = coalesce(gone_since, ?) "
            "WHERE registry = ? AND repository = ? AND list_contains(?, tag)",
            [at, registry, repository, list(tags)],
        ).fetchall()

    def record_registry_error(self, registry: str, repository: str, error: str, at: datetime) -> None:
        self._writable()
        self.con.execute(
            "INSERT INTO registry_errors VALUES (?, ?, ?, ?)", [registry, repository, error, at]
        ).fetchall()

    # ---- decisions ------------------------------------------------------------------------------

    def save_decision(self, rows: list[CriterionResult]) -> None:
        """Store one evaluation (all rows share its evaluation_id); saving it again replaces it."""
        self._writable()
        if not rows:
            return
        ids = {r.evaluation_id for r in rows}
        if len(ids) != 1:
            raise WarehouseError(f"save_decision takes one evaluation per call, got {sorted(ids)}")
        data = records_table(CriterionResult, rows)
        with self._transaction():
            self.con.execute(
                "DELETE FROM decisions WHERE evaluation_id = ?", [rows[0].evaluation_id]
            ).fetchall()
            self._insert("decisions", data)

    # ---- change points --------------------------------------------------------------------------

    @staticmethod
    def change_id(row: dict[str, Any]) -> str:
        """A stable id for a change: the same change found again keeps its id (and its acknowledgement)."""
        key = "|".join(
            str(row.get(k) or "")
            for k in ("fingerprint", "host", "engine", "metric", "scenario", "level", "sort_key_after")
        )
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def save_changes(self, rows: list[dict[str, Any]]) -> None:
        """Insert or refresh change points by change_id; an acknowledgement already given is kept."""
        self._writable()
        if not rows:
            return
        required = ("fingerprint", "engine", "host", "metric", "scenario", "level", "status")
        by_id: dict[str, dict[str, Any]] = {}
        for raw in rows:
            missing = [k for k in required if raw.get(k) is None]
            unknown = set(raw) - set(CHANGE_COLUMNS)
            if missing or unknown:
                raise WarehouseError(f"change row: missing {missing}, unknown {sorted(unknown)}: {raw!r}")
            row = {c: raw.get(c) for c in CHANGE_COLUMNS}
            row["change_id"] = row["change_id"] or self.change_id(row)
            row["ack_status"] = row["ack_status"] or "active"
            row["detected_at"] = row["detected_at"] or datetime.now(UTC)
            by_id[row["change_id"]] = row
        values = list(by_id.values())
        data = pa.Table.from_pylist(values, schema=_CHANGE_SCHEMA)
        updates = ", ".join(
            f"{c} = excluded.{c}"
            for c in CHANGE_COLUMNS
            if c not in ("change_id", "ack_status", "ack_reason")
        )
        with self._transaction():
            self._insert("changes", data, f"ON CONFLICT (change_id) DO UPDATE SET {updates}")

    def list_changes(
        self,
        *,
        host: str | None = None,
        engine: str | None = None,
        status: str | None = None,
        ack_status: str | None = None,
        fingerprint: str | None = None,
        metric: str | None = None,
    ) -> list[dict[str, Any]]:
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
        return [dict(zip(CHANGE_COLUMNS, r, strict=True)) for r in self.con.execute(sql, params).fetchall()]

    def ack_change(self, change_id: str, reason: str) -> bool:
        """Acknowledge a change (it stays, marked); False when no such change exists."""
        self._writable()
        rows = self.con.execute(
            "UPDATE changes SET ack_status = 'acknowledged', ack_reason = ? WHERE change_id = ? RETURNING change_id",
            [reason, change_id],
        ).fetchall()
        return bool(rows)

    # ---- export ---------------------------------------------------------------------------------

    def export_parquet(self, directory: str | Path, tables: Iterable[str] | None = None) -> dict[str, Path]:
        """Write every table (or the named ones) to DIR/<table>.parquet; works on a read-only open."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        names = list(tables) if tables is not None else self.table_names()
        known = set(self.table_names())
        written: dict[str, Path] = {}
        for name in names:
            if name not in known:
                raise WarehouseError(f"no table {name!r}")
            target = out / f"{name}.parquet"
            quoted = str(target).replace("'", "''")
            self.con.execute(f"COPY (SELECT * FROM \"{name}\") TO '{quoted}' (FORMAT parquet)").fetchall()
            written[name] = target
        return written

    def import_parquet(self, directory: str | Path) -> dict[str, int]:
        """Load what :meth:`export_parquet` wrote (e.g. another Box's warehouse), in ONE transaction.

        Runs in ``runs.parquet`` replace the same run_ids here in every run table; images are upserted
        by (registry, repository, tag); decisions replace their evaluation_id. Rows of a run table whose
        run_id is not in ``runs.parquet`` are refused (they would be orphans). Columns are matched by
        name, so an export from an older schema imports (missing columns become NULL).
        """
        self._writable()
        src = Path(directory)
        runs_file = src / "runs.parquet"
        if not runs_file.exists():
            raise WarehouseError(f"{src}: no runs.parquet (write one with `strix export --parquet DIR`)")

        def pq(table: str) -> str | None:
            f = src / f"{table}.parquet"
            return "read_parquet('" + str(f).replace("'", "''") + "')" if f.exists() else None

        counts: dict[str, int] = {}
        with self._transaction():
            self.con.execute(
                f"CREATE OR REPLACE TEMP TABLE _strix_import_ids AS SELECT DISTINCT run_id FROM {pq('runs')}"
            ).fetchall()
            for table in RUN_TABLES:
                source = pq(table)
                if source is None or table == "runs":
                    continue
                orphans = self.con.execute(
                    f"SELECT count(*) FROM {source} WHERE run_id NOT IN (SELECT run_id FROM _strix_import_ids)"
                ).fetchall()[0][0]
                if orphans:
                    raise WarehouseError(
                        f"{src}/{table}.parquet: {orphans} row(s) of runs not in runs.parquet"
                    )
            for table in RUN_TABLES:
                self.con.execute(
                    f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM _strix_import_ids)"
                ).fetchall()
            for table in RUN_TABLES:
                source = pq(table)
                if source is not None:
                    counts[table] = self.con.execute(
                        f"INSERT INTO {table} BY NAME SELECT * FROM {source}"
                    ).fetchall()[0][0]
            hosts = [r[0] for r in self.con.execute(f"SELECT DISTINCT host FROM {pq('runs')}").fetchall()]
            if hosts:
                self._refresh_hosts(hosts)
            if (source := pq("images")) is not None:
                updates = ", ".join(
                    f"{c} = excluded.{c}"
                    for c in column_names(ImageRecord)
                    if c not in ("registry", "repository", "tag", "first_seen")
                )
                counts["images"] = self.con.execute(
                    f"INSERT INTO images BY NAME SELECT * FROM {source} "
                    f"ON CONFLICT (registry, repository, tag) DO UPDATE SET {updates}, "
                    "first_seen = least(images.first_seen, excluded.first_seen)"
                ).fetchall()[0][0]
            if (source := pq("decisions")) is not None:
                self.con.execute(
                    f"DELETE FROM decisions WHERE evaluation_id IN (SELECT DISTINCT evaluation_id FROM {source})"
                ).fetchall()
                counts["decisions"] = self.con.execute(
                    f"INSERT INTO decisions BY NAME SELECT * FROM {source}"
                ).fetchall()[0][0]
            self.con.execute("DROP TABLE _strix_import_ids").fetchall()
        return counts


def _with_fingerprint(run: RunRecord) -> RunRecord:
    # A run without a fingerprint would join no series; the one fingerprint function can derive it
    # from the run's own fields, so the stored copy gets it (the caller's object is not touched).
    if run.fingerprint:
        return run
    return dataclasses.replace(run, fingerprint=run_fingerprint(run))


def _check_run_ids(run_id: str, cls: type, run_ids: list[str]) -> None:
    """Every row of a run carries its run_id (one C-level count, the message only on failure)."""
    if run_ids.count(run_id) != len(run_ids):
        bad = next(x for x in run_ids if x != run_id)
        raise WarehouseError(
            f"run {run_id}: a {cls.__name__} carries run_id {bad!r}; every row of a run must carry its run_id"
        )


_RESULT_FIELD = {
    "requests": "requests",
    "aggregates": "aggregates",
    "memory_samples": "memory",
    "server_metrics": "server_metrics",
}


class _Tx:
    """BEGIN ... COMMIT, or ROLLBACK on any exception (including KeyboardInterrupt)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def __enter__(self) -> None:
        self.con.begin()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            self.con.commit()
        else:
            self.con.rollback()


def dumps_flags(flags: Sequence[str]) -> str:
    """Engine flags as stored in ``runs.engine_flags`` (a JSON list)."""
    return json.dumps(list(flags))
