"""Opening the DuckDB file: lock retries, the query sandbox, writer settings, transactions and inserts.

Concurrency (DuckDB >= 1.x, one file): one *process* may open the file for writing, and while it has
it open no other process may open it at all, not even read-only; several processes may open it
read-only together. So writers open, write one short transaction and close, never holding the file
through a benchmark; readers open read-only. Both retry for ``lock_retry_s`` on the lock error and
then raise :class:`WarehouseLocked` naming the process DuckDB says holds it.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from strix_pipeline.config import load_config


class WarehouseError(RuntimeError):
    """The warehouse cannot do what was asked; the message says why and what to do."""


class WarehouseLocked(WarehouseError):
    """Another process holds the file (DuckDB allows one writer process, and no reader beside it)."""


class WarehouseMissing(WarehouseError):
    """A read-only open of a file that does not exist."""


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


def open_connection(
    path: Path,
    *,
    read_only: bool,
    lock_retry_s: float,
    on_wait: Callable[[str], None] | None,
    sandbox: bool,
) -> duckdb.DuckDBPyConnection:
    """A connection in UTC, sandboxed or with the writer settings as asked (the schema is not touched)."""
    if sandbox and not read_only:
        raise ValueError("sandbox=True is for read-only opens")
    if read_only and not path.exists():
        raise WarehouseMissing(
            f"{path}: no warehouse here yet; it is created by the first benchmark run that loads results"
        )
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    con = connect(path, read_only, lock_retry_s, on_wait, SANDBOX_CONFIG if sandbox else None)
    try:
        if sandbox:
            lock_sandbox(con, path)
        else:
            con.execute("SET TimeZone = 'UTC'").fetchall()
        if not read_only:
            writer_settings(con)
    except BaseException:
        con.close()
        raise
    return con


def is_lock_error(e: Exception) -> bool:
    msg = str(e)
    return "Could not set lock" in msg or "Conflicting lock" in msg or "lock on file" in msg


def connect(
    path: Path,
    read_only: bool,
    lock_retry_s: float,
    on_wait: Callable[[str], None] | None = None,
    config: dict[str, str | bool] | None = None,
) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect``, retrying for ``lock_retry_s`` while another holder has the file."""
    deadline = time.monotonic() + max(0.0, lock_retry_s)
    delay = 0.05
    told = False
    while True:
        try:
            if config is not None:
                return duckdb.connect(str(path), read_only=read_only, config=dict(config))
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as e:
            if not is_lock_error(e):
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


def writer_settings(con: duckdb.DuckDBPyConnection) -> None:
    # Checkpoints of a writer do not vacuum: appends leave nothing to reclaim, and after every bulk
    # load the vacuum merged the load's partial last row group with the next load's rows and compressed
    # them again, ~1.4 CPU-us per request row. Deleted rows need it: reclaim() turns it back on for the
    # loads that delete. A DuckDB without the setting just keeps vacuuming: slower, nothing lost.
    with contextlib.suppress(duckdb.Error):
        con.execute("SET max_vacuum_tasks = 0").fetchall()


def reclaim(con: duckdb.DuckDBPyConnection) -> None:
    """Checkpoint with DuckDB's default vacuuming, so the rows a reload or delete left behind give
    their space back (writers otherwise keep it off: see :func:`writer_settings`).

    If another connection of this process has a transaction open the checkpoint is refused; the
    space then waits for the next reload, and nothing is lost but disk.
    """
    with contextlib.suppress(duckdb.Error):
        con.execute("RESET max_vacuum_tasks").fetchall()
        con.execute("CHECKPOINT").fetchall()
    writer_settings(con)


def lock_sandbox(con: duckdb.DuckDBPyConnection, path: Path) -> None:
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


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """BEGIN ... COMMIT, or ROLLBACK on any exception (including KeyboardInterrupt)."""
    con.begin()
    try:
        yield
    except BaseException:
        con.rollback()
        raise
    con.commit()


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, table: str, data: pa.Table) -> Iterator[str]:
    """``data`` registered on the connection under a name to select from, dropped afterwards."""
    # One name per table: a registration is per connection and is dropped right after the statement.
    name = f"_strix_load_{table}"
    con.register(name, data)
    try:
        yield name
    finally:
        try:
            con.unregister(name)
        except duckdb.Error:
            pass  # an aborted transaction refuses even this; the next register replaces the name


def insert(con: duckdb.DuckDBPyConnection, table: str, data: pa.Table, suffix: str = "") -> None:
    """``INSERT INTO table BY NAME`` the rows of an Arrow table (``suffix``: e.g. an ON CONFLICT clause)."""
    with registered(con, table, data) as name:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {name} {suffix}").fetchall()


def default_warehouse_path(config: str | Path | None = None) -> Path:
    """Where the configuration puts the warehouse (``project.warehouse``, default warehouse/strix.duckdb)."""
    return load_config(config).warehouse_path()
