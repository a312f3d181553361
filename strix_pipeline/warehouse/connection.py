"""Opening the warehouse (a DuckDB file or a DuckLake lakehouse): lock retries, the query sandbox,
writer settings, transactions (retried on a commit conflict) and inserts.

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
import importlib.util
import logging
import os
import posixpath
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from strix_pipeline.config import DuckLakeTarget
from strix_pipeline.config_load import load_config

T = TypeVar("T")
log = logging.getLogger(__name__)

# What Warehouse.open takes: the DuckDB file, or a DuckLake lakehouse.
Target = Path | DuckLakeTarget


class WarehouseError(RuntimeError):
    """The warehouse cannot do what was asked; the message says why and what to do."""


class WarehouseUnavailable(WarehouseError):
    """The warehouse itself cannot take a load now (held, full, damaged, too new, conflicting): no other
    run would load either, unlike a run whose own rows are refused."""


class WarehouseLocked(WarehouseUnavailable):
    """Another process holds the file (DuckDB allows one writer process, and no reader beside it)."""


class WarehouseMissing(WarehouseError):
    """A read-only open of a file that does not exist."""


class CommitConflict(WarehouseUnavailable):
    """Another writer's commit conflicted with this one on every attempt :data:`COMMIT_RETRY` allows."""


# DuckDB settings of a sandboxed reader, given when the database instance is created (DuckDB shares one
# instance per file and process, so they can neither leak to nor be missing from another connection:
# an open with other settings is refused as "different configuration"). enable_external_access=false
# refuses every file but the database's own and its spill directory, so the spill directory is turned
# off (temp_directory=''): a query then has to fit in memory_limit (80% of RAM by default) instead of
# being able to COPY into <warehouse>.tmp/. Extensions are neither fetched nor loaded on demand; those
# built into the wheel (parquet, json, icu) work as before. lock_configuration is set after TimeZone.
# Once the database is open, the local file system is turned off altogether (:func:`lock_sandbox`):
# external access off still lets a query write the database's WAL files (<db>.wal, .wal.checkpoint,
# .wal.recovery), and overwriting a WAL that holds committed rows loses them.
SANDBOX_CONFIG: dict[str, str | bool] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "temp_directory": "",
}


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
    timestamps, and a writer's settings."""
    if sandbox:
        lock_sandbox(con, where, memory_limit=memory_limit)
    else:
        con.execute("SET TimeZone = 'UTC'").fetchall()
    if not read_only:
        writer_settings(con)


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

# The extensions DuckLake needs, each from its PyPI package (module name, extension name). They are
# built for one DuckDB release and installed under extensions/v<release>/ in the package: this
# project's machines cannot reach extensions.duckdb.org, so DuckDB must never try to (autoinstall and
# autoload off) and loads exactly these files.
DUCKLAKE_EXTENSIONS: tuple[tuple[str, str], ...] = (
    ("duckdb_extension_postgres_scanner", "postgres_scanner"),
    ("duckdb_extension_ducklake", "ducklake"),
)
LAKE = "strix_lake"  # the lakehouse's name inside the connection (USEd, so queries name tables bare)

# Created with the instance; for a sandbox the rest (no external access, lock) follows the ATTACH.
_LAKE_CONFIG: dict[str, str | bool] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


def extension_file(module: str, name: str) -> Path:
    """The packaged ``<name>.duckdb_extension`` built for the running DuckDB; a clear error if absent."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        pkg = module.replace("_", "-")
        raise WarehouseError(
            f"the DuckLake warehouse needs the {name} DuckDB extension: pip install {pkg}=={duckdb.__version__}"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    f = root / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not f.is_file():
        built = sorted(p.name for p in root.glob("v*")) or ["none"]
        raise WarehouseError(
            f"{f}: the {name} extension installed is built for DuckDB {', '.join(built)}, not the running "
            f"{duckdb.__version__}; install the same version of both (see requirements.lock)"
        )
    return f


def _sql_str(s: str | Path) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def open_ducklake(
    target: DuckLakeTarget, *, read_only: bool, sandbox: bool, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the lakehouse ATTACHed and USEd. A sandbox is :func:`open_lake_sandbox`."""
    if sandbox:
        return open_lake_sandbox(target, memory_limit=memory_limit)
    data = target.data_path
    data_dir = _sql_str(str(data).rstrip("/") + "/")
    if not read_only:
        data.mkdir(parents=True, exist_ok=True)
    elif not data.is_dir():
        raise WarehouseMissing(
            f"{target}: no data directory {data} yet; it is created by the first writer that opens the warehouse"
        )
    con = duckdb.connect(":memory:", config=dict(_LAKE_CONFIG))
    try:
        for module, name in DUCKLAKE_EXTENSIONS:
            con.execute(f"LOAD {_sql_str(extension_file(module, name))}").fetchall()
        opts = f"DATA_PATH {data_dir}" + (", READ_ONLY" if read_only else "")
        _attach(con, target, opts, read_only=read_only)
        con.execute(f"USE {LAKE}").fetchall()
        _session(con, target, sandbox=False, read_only=read_only)
    except BaseException:
        con.close()
        raise
    return con


# A sandboxed reader of the lake (``strix query``) reaches PostgreSQL not at all and the data files
# only through this read-only file system: with the catalog attached, the postgres extension's
# functions (postgres_query, postgres_scan, postgres_execute, ...) would run any SQL on the catalog
# server or connect to any DSN written in the query, and duckdb_databases() and the settings would show
# the DSN with its password; and DuckDB's allowed_directories lets a query write where it may read.
LAKE_PROTOCOL = "strixlake"


class ReadOnlyLakeFiles(AbstractFileSystem):
    """``strixlake:///<data path>/...``: the lake's data directory, read-only, nothing outside it.

    Only reading is implemented; fsspec's defaults for the rest raise (rm, mv, copy) or do nothing
    (mkdir), and opening for anything but ``rb`` is refused here."""

    protocol = LAKE_PROTOCOL
    root_marker = "/"
    cachable = False

    def __init__(self, root: Path, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.root = os.path.realpath(root)
        self.local = LocalFileSystem()

    @classmethod
    def _strip_protocol(cls, path: str | list[str]) -> str | list[str]:
        if isinstance(path, list):
            return [str(cls._strip_protocol(p)) for p in path]
        path = str(path)
        if path.startswith(f"{LAKE_PROTOCOL}://"):
            path = path[len(LAKE_PROTOCOL) + 3 :]
        return posixpath.normpath(path) if path else "/"

    def _inside(self, path: str) -> str:
        p = str(self._strip_protocol(path))
        real = os.path.realpath(p)
        if real != self.root and not real.startswith(self.root + os.sep):
            raise PermissionError(f"{path}: outside the lake's data directory")
        return p

    def ls(self, path: str, detail: bool = True, **kwargs: object) -> list:
        return self.local.ls(self._inside(path), detail=detail)

    def info(self, path: str, **kwargs: object) -> dict:
        return self.local.info(self._inside(path))

    def modified(self, path: str):  # noqa: ANN201 - a datetime, as LocalFileSystem's
        return self.local.modified(self._inside(path))

    def _open(self, path: str, mode: str = "rb", **kwargs: object):  # noqa: ANN202 - a binary file
        if mode != "rb":
            raise PermissionError(f"{path}: the lake's data files are read-only here (mode {mode!r})")
        return self.local._open(self._inside(path), "rb")


def open_lake_sandbox(
    target: DuckLakeTarget, *, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """The lake for SQL someone typed: its catalog copied (one consistent PostgreSQL snapshot) into a
    private DuckDB file, ATTACHed READ_ONLY in a connection that never loads the postgres extension
    and never sees the DSN; data files through :class:`ReadOnlyLakeFiles`; then, as for a file,
    no local file system, no external access, settings locked. The copy is deleted once attached
    (the open handle keeps it readable)."""
    data = target.data_path
    if not data.is_dir():
        raise WarehouseMissing(
            f"{target}: no data directory {data} yet; it is created by the first writer that opens the warehouse"
        )
    scratch = Path(tempfile.mkdtemp(prefix="strix-query-"))
    try:
        catalog = scratch / "catalog.ducklake"
        lake_data = f"{LAKE_PROTOCOL}://" + os.path.realpath(data).rstrip("/") + "/"
        _copy_catalog(target, catalog, lake_data)
        con = duckdb.connect(":memory:", config=dict(_LAKE_CONFIG))
        try:
            con.register_filesystem(ReadOnlyLakeFiles(data))
            name, module = "ducklake", "duckdb_extension_ducklake"
            con.execute(f"LOAD {_sql_str(extension_file(module, name))}").fetchall()
            con.execute(f"ATTACH {_sql_str('ducklake:' + str(catalog))} AS {LAKE} (READ_ONLY)").fetchall()
            con.execute(f"USE {LAKE}").fetchall()
            con.execute(f"SET allowed_directories = [{_sql_str(lake_data)}]").fetchall()
            con.execute("SET temp_directory = ''").fetchall()  # refused once external access is off
            con.execute("SET enable_external_access = false").fetchall()
            _session(con, target, sandbox=True, read_only=True, memory_limit=memory_limit)
        except BaseException:
            con.close()
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return con


def _copy_catalog(target: DuckLakeTarget, dest: Path, data_path: str) -> None:
    """Every DuckLake table of the catalog's schema into the DuckDB file ``dest``, read in one
    REPEATABLE READ transaction of a READ_ONLY PostgreSQL attach; its data_path set to ``data_path``."""
    con = duckdb.connect(":memory:", config=dict(_LAKE_CONFIG))
    try:
        module, name = DUCKLAKE_EXTENSIONS[0]
        con.execute(f"LOAD {_sql_str(extension_file(module, name))}").fetchall()
        try:
            con.execute(f"ATTACH {_sql_str(target.catalog_dsn)} AS pg (TYPE postgres, READ_ONLY)").fetchall()
            con.execute(f"ATTACH {_sql_str(dest)} AS cat").fetchall()
            con.execute("BEGIN").fetchall()
            schemas = [
                r[0]
                for r in con.execute(
                    "SELECT schema_name FROM duckdb_tables() WHERE database_name = 'pg' "
                    "AND table_name = 'ducklake_metadata' ORDER BY schema_name <> 'public', schema_name"
                ).fetchall()
            ]
            if not schemas:
                raise WarehouseMissing(
                    f"{target}: no warehouse in this catalog yet; the first writer creates it"
                )
            tables = [
                r[0]
                for r in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = 'pg' AND schema_name = ? "
                    "AND table_name LIKE 'ducklake%'",
                    [schemas[0]],
                ).fetchall()
            ]
            for t in tables:
                q = '"' + t.replace('"', '""') + '"'
                s = '"' + schemas[0].replace('"', '""') + '"'
                con.execute(f"CREATE TABLE cat.main.{q} AS SELECT * FROM pg.{s}.{q}").fetchall()
            con.execute("COMMIT").fetchall()
            con.execute(
                "UPDATE cat.main.ducklake_metadata SET value = ? WHERE key = 'data_path' AND scope IS NULL",
                [data_path],
            ).fetchall()
        except duckdb.Error as e:
            # DuckDB's message may repeat the DSN (a password too): say what failed without it.
            msg = str(e).replace(target.catalog_dsn, f"${target.catalog_env or 'DSN'}")
            raise WarehouseError(f"{target}: cannot read the DuckLake catalog: {msg}") from None
    finally:
        con.close()


def _attach(con: duckdb.DuckDBPyConnection, target: DuckLakeTarget, opts: str, *, read_only: bool) -> None:
    waits = COMMIT_RETRY.waits()
    while True:
        try:
            con.execute(f"ATTACH {_sql_str('ducklake:postgres:' + target.catalog_dsn)} AS {LAKE} ({opts})")
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


def lock_sandbox(con: duckdb.DuckDBPyConnection, path: Target, *, memory_limit: str | None = None) -> None:
    locked = con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]
    if locked:
        # Another sandboxed reader of this process already locked the shared instance; this connection
        # could not set its TimeZone (a per-connection value), so its times would be in the wrong zone.
        raise WarehouseLocked(
            f"{path}: this process already has a sandboxed reader of the warehouse open; close it first"
        )
    con.execute("SET TimeZone = 'UTC'").fetchall()
    if memory_limit is not None:
        try:
            con.execute(f"SET memory_limit = {_sql_str(memory_limit)}").fetchall()
        except duckdb.Error as e:
            raise WarehouseError(f"memory limit {memory_limit!r}: {e}") from None
    # The database (and a lake's catalog copy) is open: from here on no local file at all, not even
    # the WAL files enable_external_access=false still allows (SANDBOX_CONFIG).
    con.execute("SET disabled_filesystems = 'LocalFileSystem'").fetchall()
    con.execute("SET lock_configuration = true").fetchall()
    got = con.execute(
        "SELECT current_setting('enable_external_access'), current_setting('lock_configuration')"
    ).fetchall()[0]
    try:  # current_setting('disabled_filesystems') reads '' in DuckDB 1.5 even when it applies
        con.execute("SELECT count(*) FROM glob('/*')").fetchall()
        got += ("local files readable",)
    except duckdb.PermissionException as e:
        if "LocalFileSystem has been disabled" not in str(e):
            got += (str(e),)
    if got != (False, True):  # a DuckDB that ignored a setting must not run the query
        raise WarehouseError(f"{path}: DuckDB did not apply the query sandbox settings: {got}")


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


def default_warehouse_path(config: str | Path | None = None) -> Path:
    """Where the configuration puts the warehouse (``project.warehouse``, default warehouse/strix.duckdb)."""
    return load_config(config).warehouse_path()
