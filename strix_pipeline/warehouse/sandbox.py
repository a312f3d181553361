"""The query sandbox (``strix query``: SQL someone typed): the settings of a sandboxed reader, locking
them once the warehouse is open, and for a DuckLake the private read-only copy of its catalog with the
data files behind a read-only file system (:class:`ReadOnlyLakeFiles`)."""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from datetime import datetime
from pathlib import Path

import duckdb
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

from strix_pipeline.config import DuckLakeTarget
from strix_pipeline.warehouse.errors import WarehouseError, WarehouseLocked, WarehouseMissing
from strix_pipeline.warehouse.extensions import (
    DUCKLAKE_EXTENSIONS,
    LAKE,
    LAKE_CONFIG,
    extension_file,
    sql_str,
)
from strix_pipeline.warehouse.sql_names import quoted

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


def no_external_access(
    con: duckdb.DuckDBPyConnection, where: Path | DuckLakeTarget, *, allowed: list[str], spill: bool
) -> None:
    """From here on the connection's SQL reaches no file but the database's own (its WAL and, given
    ``spill``, its spill directory) and the directories ``allowed`` (a lake's data files), and no
    network but what is already attached: the rule of a sandboxed reader, and of a writer once it has
    opened what it needs, so a stored view's SQL cannot read or write a file while a writer runs
    migrations or view checks. DuckDB refuses to turn it back on while the database is open."""
    if allowed:
        con.execute(f"SET allowed_directories = [{', '.join(sql_str(d) for d in allowed)}]").fetchall()
    if not spill:
        con.execute("SET temp_directory = ''").fetchall()  # refused once external access is off
    con.execute("SET enable_external_access = false").fetchall()
    if con.execute("SELECT current_setting('enable_external_access')").fetchall()[0][0] is not False:
        raise WarehouseError(f"{where}: DuckDB did not turn off external access")


def lock_sandbox(
    con: duckdb.DuckDBPyConnection, path: Path | DuckLakeTarget, *, memory_limit: str | None = None
) -> None:
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
            con.execute(f"SET memory_limit = {sql_str(memory_limit)}").fetchall()
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

    def modified(self, path: str) -> datetime:
        return self.local.modified(self._inside(path))

    def _open(self, path: str, mode: str = "rb", **kwargs: object) -> LocalFileOpener:
        if mode != "rb":
            raise PermissionError(f"{path}: the lake's data files are read-only here (mode {mode!r})")
        return self.local._open(self._inside(path), "rb")


def lake_files_url(data: Path) -> str:
    """The lake's data directory as :class:`ReadOnlyLakeFiles` serves it (``strixlake:///<real path>/``)."""
    return f"{LAKE_PROTOCOL}://" + os.path.realpath(data).rstrip("/") + "/"


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
            f"{target}: no data directory {data} yet; it is created by the first writer that opens "
            "the warehouse"
        )
    scratch = Path(tempfile.mkdtemp(prefix="strix-query-"))
    try:
        catalog = scratch / "catalog.ducklake"
        lake_data = lake_files_url(data)
        _copy_catalog(target, catalog, lake_data)
        con = duckdb.connect(":memory:", config=dict(LAKE_CONFIG))
        try:
            con.register_filesystem(ReadOnlyLakeFiles(data))
            name, module = "ducklake", "duckdb_extension_ducklake"
            con.execute(f"LOAD {sql_str(extension_file(module, name))}").fetchall()
            con.execute(f"ATTACH {sql_str('ducklake:' + str(catalog))} AS {LAKE} (READ_ONLY)").fetchall()
            con.execute(f"USE {LAKE}").fetchall()
            no_external_access(con, target, allowed=[lake_data], spill=False)
            lock_sandbox(con, target, memory_limit=memory_limit)
        except BaseException:
            con.close()
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return con


def _copy_catalog(target: DuckLakeTarget, dest: Path, data_path: str) -> None:
    """Every DuckLake table of the catalog's schema into the DuckDB file ``dest``, read in one
    REPEATABLE READ transaction of a READ_ONLY PostgreSQL attach; its data_path set to ``data_path``."""
    con = duckdb.connect(":memory:", config=dict(LAKE_CONFIG))
    try:
        module, name = DUCKLAKE_EXTENSIONS[0]
        con.execute(f"LOAD {sql_str(extension_file(module, name))}").fetchall()
        try:
            con.execute(f"ATTACH {sql_str(target.catalog_dsn)} AS pg (TYPE postgres, READ_ONLY)").fetchall()
            con.execute(f"ATTACH {sql_str(dest)} AS cat").fetchall()
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
                q, s = quoted(t), quoted(schemas[0])  # a name with a quote is refused, never escaped
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
