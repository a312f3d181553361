"""Opening the warehouse (a DuckDB file or a DuckLake lakehouse): lock retries, writer settings,
transactions (retried on a commit conflict) and inserts. The query sandbox is :mod:`.sandbox`, the
errors :mod:`.errors`, the DuckLake extension files :mod:`.extensions` (their names re-exported here).

Concurrency (DuckDB >= 1.x, one file): one *process* may open the file for writing, and while it has
it open no other process may open it at all, not even read-only; several processes may open it
read-only together. So writers open, write one short transaction and close, never holding the file
through a benchmark; readers open read-only. Both retry for ``lock_retry_s`` on the lock error and
then raise :class:`WarehouseLocked` naming the process DuckDB says holds it.

DuckLake (:class:`~strix_pipeline.config.DuckLakeTarget`): each open is its own in-memory DuckDB that
loads the DuckLake and PostgreSQL extensions from their PyPI packages and ATTACHes the lakehouse
(catalog in PostgreSQL, Parquet data files in ``data_path``). Any number of processes read and write
it at once; DuckLake commits optimistically, so two transactions that change the same table's rows
may conflict at COMMIT, and :func:`in_transaction` runs the work again (:data:`COMMIT_RETRY`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from strix_pipeline.config import DuckLakeTarget
from strix_pipeline.warehouse.errors import (
    CommitConflict,
    WarehouseError,
    WarehouseLocked,
    WarehouseMissing,
)
from strix_pipeline.warehouse.extensions import (
    DUCKLAKE_EXTENSIONS,
    LAKE,
    LAKE_CONFIG,
    extension_file,
    sql_str,
)
from strix_pipeline.warehouse.sandbox import (
    SANDBOX_CONFIG,
    ReadOnlyLakeFiles,
    lake_files_url,
    lock_sandbox,
    no_external_access,
    open_lake_sandbox,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

# What Warehouse.open takes: the DuckDB file, or a DuckLake lakehouse.
Target = Path | DuckLakeTarget


def open_connection(
    path: Target,
    *,
    read_only: bool,
    lock_retry_s: float,
    on_wait: Callable[[str], None] | None,
    sandbox: bool,
    memory_limit: str | None = None,
) -> duckdb.DuckDBPyConnection:
    """A connection in UTC, sandboxed or with the writer settings as asked (the schema is not touched).
    ``memory_limit`` (DuckDB's syntax, e.g. ``2GB``) is set on a sandbox before its settings are locked."""
    if sandbox and not read_only:
        raise ValueError("sandbox=True is for read-only opens")
    if isinstance(path, DuckLakeTarget):
        return open_ducklake(path, read_only=read_only, sandbox=sandbox, memory_limit=memory_limit)
    if read_only and not path.exists():
        raise WarehouseMissing(
            f"{path}: no warehouse here yet; it is created by the first benchmark run that loads results"
        )
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    con = connect(path, read_only, lock_retry_s, on_wait, SANDBOX_CONFIG if sandbox else None)
    try:
        _session(con, path, sandbox=sandbox, read_only=read_only, memory_limit=memory_limit)
    except BaseException:
        con.close()
        raise
    return con


def _session(
    con: duckdb.DuckDBPyConnection,
    where: Target,
    *,
    sandbox: bool,
    read_only: bool,
    memory_limit: str | None = None,
) -> None:
    """What every open of either backend ends with: the sandbox locked (``strix query``) or UTC
    timestamps, and a writer's settings. A writer then drops its file-system access before anything
    stored is touched (the schema's migrations, the view check, a load): its own files (and a lake's
    data directory) stay reachable, no other; what it loads from a file is read in Python."""
    if sandbox:
        lock_sandbox(con, where, memory_limit=memory_limit)
    else:
        con.execute("SET TimeZone = 'UTC'").fetchall()
    if not read_only:
        writer_settings(con)
        lake = [str(where.data_path).rstrip("/") + "/"] if isinstance(where, DuckLakeTarget) else []
        no_external_access(con, where, allowed=lake, spill=True)


def is_lock_error(e: Exception) -> bool:
    msg = str(e)
    return "Could not set lock" in msg or "Conflicting lock" in msg or "lock on file" in msg


@dataclass(frozen=True)
class LockHolder:
    """Who holds the file, as far as DuckDB's lock error and /proc tell (Linux; elsewhere less)."""

    pid: int | None
    command: str | None  # its command line, cut short
    reader: bool | None  # holds a read (shared) lock: a read-only open, e.g. a query; None: unknown

    def describe(self) -> str:
        who = "another process"
        if self.pid is not None:
            who += f" (PID {self.pid})" + (f" running `{self.command}`" if self.command else "")
        return who

    @property
    def is_query(self) -> bool:
        return bool(self.command) and str(self.command).startswith("strix query")


def lock_holder(path: Path, e: Exception) -> LockHolder:
    """The holder DuckDB names (its pid), its command line and whether its lock is a reader's."""
    found = re.search(r"\(PID (\d+)\)", str(e))
    if found is None:
        return LockHolder(None, None, None)
    pid = int(found.group(1))
    command = None
    with contextlib.suppress(OSError):
        words = [
            a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a
        ]
        # ".../bin/strix query ..." or "python -m strix_pipeline.cli query ...": shown from the command on
        for i, w in enumerate(words):
            if posixpath.basename(w) == "strix" or w == "strix_pipeline.cli":
                words = ["strix", *words[i + 1 :]]
                break
        shown = "".join(c if c.isprintable() else "?" for c in " ".join(words))
        command = shown if len(shown) <= 120 else shown[:119] + "…"
    reader = None
    with contextlib.suppress(OSError, ValueError):
        inode = os.stat(path).st_ino
        for line in Path("/proc/locks").read_text().splitlines():
            f = line.split()
            # "1: POSIX  ADVISORY  READ 15802 fe:00:2179844 0 EOF"
            if len(f) >= 6 and f[4] == str(pid) and f[5].rsplit(":", 1)[-1] == str(inode):
                reader = f[3] == "READ"
                break
    return LockHolder(pid, command, reader)


def _locked_message(path: Path, holder: LockHolder, read_only: bool, waited: float) -> str:
    if holder.reader and not read_only:
        what = "a `strix query`" if holder.is_query else "a reader"
        return (
            f"{path}: {what}, {holder.describe()}, has the warehouse open read-only, and DuckDB lets no "
            f"writer in while any other process has it open; waited {waited:g}s. It lets go when it ends "
            f"(a strix query stops at its --timeout); stop it or try again then."
        )
    return (
        f"{path}: {holder.describe()} has the warehouse open, and DuckDB lets no other process "
        f"open it while a writer holds it; waited {waited:g}s. A benchmark run is probably "
        f"loading its results: try again in a moment."
    )


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
            holder = lock_holder(path, e)
            if time.monotonic() >= deadline:
                raise WarehouseLocked(_locked_message(path, holder, read_only, lock_retry_s)) from e
            if on_wait is not None and not told:
                told = True
                by = "a writer"
                if holder.reader and not read_only:
                    by = "a `strix query`" if holder.is_query else "a reader"
                on_wait(f"{path} is held by {by}, {holder.describe()}; waiting up to {lock_retry_s:g}s")
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
                    f"also open it {mode} (waited {lock_retry_s:g}s); use the open Warehouse, or "
                    "close it first"
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
    space then waits for the next reload, and nothing is lost but disk. A DuckLake's CHECKPOINT is
    its whole maintenance (merging files, expiring snapshots, deleting files) across every writer's
    data: an operator's job on a schedule (docs/warehouse.md), not something each load triggers.
    """
    if is_ducklake(con):
        return
    with contextlib.suppress(duckdb.Error):
        con.execute("RESET max_vacuum_tasks").fetchall()
        con.execute("CHECKPOINT").fetchall()
    writer_settings(con)


# ---- DuckLake ---------------------------------------------------------------------------------


def open_ducklake(
    target: DuckLakeTarget, *, read_only: bool, sandbox: bool, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the lakehouse ATTACHed and USEd. A sandbox is :func:`open_lake_sandbox`;
    a reader is sealed as it is once attached (:func:`lake_files_url`)."""
    if sandbox:
        return open_lake_sandbox(target, memory_limit=memory_limit)
    data = target.data_path
    data_dir = sql_str(str(data).rstrip("/") + "/")
    reader_data = lake_files_url(data)
    if not read_only:
        data.mkdir(parents=True, exist_ok=True)
    elif not data.is_dir():
        raise WarehouseMissing(
            f"{target}: no data directory {data} yet; it is created by the first writer that opens "
            "the warehouse"
        )
    con = duckdb.connect(":memory:", config=dict(LAKE_CONFIG))
    try:
        for module, name in DUCKLAKE_EXTENSIONS:
            con.execute(f"LOAD {sql_str(extension_file(module, name))}").fetchall()
        opts = f"DATA_PATH {data_dir}"
        if read_only:
            # A reader reaches the data files only through a read-only file system rooted at them (this
            # open's path to them, never stored: READ_ONLY), so the local one can be turned off.
            con.register_filesystem(ReadOnlyLakeFiles(data))
            opts = f"DATA_PATH {sql_str(reader_data)}, OVERRIDE_DATA_PATH true, READ_ONLY"
        _attach(con, target, opts, read_only=read_only)
        con.execute(f"USE {LAKE}").fetchall()
        if read_only:
            # Every reader of the stored views (the report, the charts, decide, export, the Dagster
            # resources') as `strix query` once the lake is attached: no local file, external access off,
            # settings locked, so a view that ever passed the view check could read no file.
            no_external_access(con, target, allowed=[reader_data], spill=False)
            lock_sandbox(con, target)
        else:
            _session(con, target, sandbox=False, read_only=read_only)
    except BaseException:
        con.close()
        raise
    return con


def _attach(con: duckdb.DuckDBPyConnection, target: DuckLakeTarget, opts: str, *, read_only: bool) -> None:
    waits = COMMIT_RETRY.waits()
    while True:
        try:
            con.execute(f"ATTACH {sql_str('ducklake:postgres:' + target.catalog_dsn)} AS {LAKE} ({opts})")
            return
        except duckdb.Error as e:
            # Two first writers of an empty catalog both create DuckLake's own tables; the loser
            # fails on PostgreSQL's unique index, and the catalog is whole once the winner commits.
            racing = "Failed to initialize DuckLake" in str(e) and "already exists" in str(e)
            wait = next(waits, None) if racing else None
            if wait is None:
                # DuckDB's message may repeat the DSN (a password too): say what failed without it.
                msg = str(e).replace(target.catalog_dsn, f"${target.catalog_env or 'DSN'}")
                if read_only and "does not exist" in msg.lower():
                    raise WarehouseMissing(
                        f"{target}: no warehouse in this catalog yet; the first writer creates it ({msg})"
                    ) from None
                raise WarehouseError(f"{target}: cannot attach the DuckLake warehouse: {msg}") from None
        log.warning("the DuckLake catalog is being created by another writer; attaching again in %.2fs", wait)
        time.sleep(wait)


def is_ducklake(con: duckdb.DuckDBPyConnection) -> bool:
    rows = con.execute(
        "SELECT type FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchall()
    return bool(rows) and rows[0][0] == "ducklake"


# ---- commits ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitRetry:
    """How often a transaction that lost a commit conflict runs again, and how long apart.

    DuckLake itself retries a commit whose changes do not overlap the winner's (appends to the same
    table, say: ``ducklake_max_retry_count``); what reaches us is a *logical* conflict -- both changed
    rows of one table (a reload's DELETE, the hosts MERGE) -- and the only safe retry is to run the
    whole unit again on the new snapshot. Every unit here is idempotent (a load deletes its run_ids
    first), so that is safe; the jitter keeps two losers from colliding again in step.
    """

    attempts: int = 10
    first_wait_s: float = 0.1
    backoff: float = 2.0
    max_wait_s: float = 4.0  # waits 0.1, 0.2, ... 3.2, then 4 s: ~22 s in all (x0.5-1.5 jitter each)

    def waits(self) -> Iterator[float]:
        wait = self.first_wait_s
        for _ in range(self.attempts - 1):
            yield min(wait, self.max_wait_s) * random.uniform(0.5, 1.5)
            wait *= self.backoff


COMMIT_RETRY = CommitRetry()


def is_conflict(e: BaseException) -> bool:
    # DuckLake: "Transaction conflict: attempting to ... but it has been ... by a different
    # transaction", "Exceeded the maximum retry count ..."; DuckDB in one process: "Conflict on ...".
    if not isinstance(e, duckdb.TransactionException):
        return False
    msg = str(e)
    return "onflict" in msg or "maximum retry count" in msg


def in_transaction(
    con: duckdb.DuckDBPyConnection,
    work: Callable[[], T],
    *,
    retry: CommitRetry | None = None,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """``work()`` between BEGIN and COMMIT, run again (bounded: ``retry``) when the commit or a
    statement lost a write conflict to another writer; :class:`CommitConflict` after the last."""
    retry = retry or COMMIT_RETRY
    waits = retry.waits()
    attempt = 1
    while True:
        try:
            with transaction(con):
                return work()
        except duckdb.Error as e:
            if not is_conflict(e):
                raise
            wait = next(waits, None)
            if wait is None:
                raise CommitConflict(
                    f"another writer's commit conflicted with this one {attempt} times in a row; nothing of "
                    f"this transaction was kept: {e}"
                ) from e
            log.warning(
                "commit conflict on attempt %d, running the transaction again in %.2fs: %s", attempt, wait, e
            )
            if on_retry is not None:
                on_retry(attempt, e)
            time.sleep(wait)
            attempt += 1


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """BEGIN ... COMMIT, or ROLLBACK on any exception (including KeyboardInterrupt)."""
    con.begin()
    try:
        yield
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT may have ended the transaction already
            con.rollback()
        raise
    try:
        con.commit()
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.rollback()
        raise


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


def insert(con: duckdb.DuckDBPyConnection, table: str, data: pa.Table) -> None:
    """``INSERT INTO table BY NAME`` the rows of an Arrow table."""
    with registered(con, table, data) as name:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {name}").fetchall()
