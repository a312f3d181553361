"""The spool: a run's records written to a file before the warehouse is opened, so nothing measured is
lost when the warehouse cannot take them (held by another writer process, a full disk, a damaged file).

:func:`store_run` is THE way a measured run reaches the warehouse: spool, open the writer, load older
spool files (:func:`drain`), load this run, delete each spool file only after its load committed; a
failed load raises :class:`RunNotStored` and the file stays. The file format (one Arrow IPC file per
run, written atomically), idempotence and lock waits: docs/warehouse.md ("The spool").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import pyarrow as pa

from strix_pipeline.records import (
    LevelAggregate,
    MemorySample,
    QualityAnswer,
    RequestRecord,
    RequestTable,
    RunRecord,
    RunResult,
    ServerMetricSample,
    refused_value,
)
from strix_pipeline.safe_write import write_file
from strix_pipeline.warehouse import arrow
from strix_pipeline.warehouse.connection import Target
from strix_pipeline.warehouse.errors import WarehouseError, WarehouseUnavailable
from strix_pipeline.warehouse.facade import Warehouse

SPOOL_VERSION = 1
SPOOL_SUFFIX = ".spool.arrow"
REFUSED_SUFFIX = ".refused"  # a spool file that cannot be loaded, moved aside under this name
_META_KEY = b"strix.spool"

# The run tables in a spool file, with the RunResult field each one comes from (runs: the one RunRecord).
_TABLES: dict[str, tuple[type, str]] = {
    "runs": (RunRecord, "run"),
    "requests": (RequestRecord, "requests"),
    "aggregates": (LevelAggregate, "aggregates"),
    "memory_samples": (MemorySample, "memory"),
    "server_metrics": (ServerMetricSample, "server_metrics"),
    "quality_answers": (QualityAnswer, "quality"),
}
# tables a spool file written before them lacks: read as none (the file's version is the same)
_LATER_TABLES = frozenset({"quality_answers"})


class SpoolUnreadable(WarehouseError):
    """A spool file that is not one this code wrote (damaged, cut short, another format version)."""


class RunNotStored(WarehouseError):
    """The warehouse did not take a run; the message says why and where its records are kept."""

    def __init__(self, message: str, *, run_id: str, warehouse: Target | None, spool: Path | None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.warehouse = warehouse
        self.spool = spool


@dataclass(frozen=True)
class HostFacts:
    """The configured facts of the run's host, recorded with the run (``hosts`` table)."""

    name: str
    kind: str | None
    description: str | None


@dataclass
class Spooled:
    result: RunResult
    host: HostFacts | None
    spooled_at: datetime


@dataclass
class DrainReport:
    loaded: list[tuple[Path, str]] = field(default_factory=list)  # (spool file, run_id), in load order
    # (spool file, why) of files that cannot be read or whose rows the warehouse refused: kept in place
    unreadable: list[tuple[Path, str]] = field(default_factory=list)


@dataclass
class StoreReport:
    run_id: str
    warehouse: Target  # the DuckDB file or the DuckLake
    drained: DrainReport
    spool_error: str | None = None  # the run could not be spooled (it was loaded all the same)

    def notes(self) -> list[str]:
        """What a person should hear about this load besides "loaded": earlier runs it loaded too,
        spool files left behind, a spool that could not be written."""
        out = []
        if self.drained.loaded:
            out.append("loaded runs spooled earlier: " + ", ".join(rid for _, rid in self.drained.loaded))
        out += [f"spool file {p} cannot be loaded: {why}" for p, why in self.drained.unreadable]
        if self.spool_error:
            out.append(f"run {self.run_id} was loaded but could not be spooled first: {self.spool_error}")
        return out


def spool_dir(artifacts: Path) -> Path:
    return artifacts / "spool"


def spool_path(directory: Path, run_id: str) -> Path:
    # run ids are ours ("host-engine-model-dagster8"), but a name must never leave the directory
    return directory / f"{quote(run_id, safe='')}{SPOOL_SUFFIX}"


def pending(directory: Path) -> list[Path]:
    """The complete spool files in ``directory``, oldest first (temporary files are not complete). Not
    followed: a link is listed by its own time and refused when read (:func:`read_spool`)."""
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        if not p.name.endswith(SPOOL_SUFFIX) or p.name.startswith("."):
            continue
        try:
            found.append((p.lstat().st_mtime_ns, p.name, p))
        except FileNotFoundError:  # another writer loaded it meanwhile
            continue
    return [p for _, _, p in sorted(found)]


def write_spool(result: RunResult, directory: Path, host: HostFacts | None = None) -> Path:
    """Write ``result`` to ``directory`` atomically; returns the spool file."""
    columns: dict[str, pa.Array] = {}
    for table, (cls, attr) in _TABLES.items():
        if table == "requests":
            data = arrow.requests_table([result])
        else:
            rows = [result.run] if table == "runs" else getattr(result, attr)
            arrow.check_run_ids(result.run.run_id, cls, list(map(arrow.RUN_ID, rows)))
            data = arrow.records_table(cls, rows)
        struct = data.to_struct_array().combine_chunks()
        offsets = pa.array([0, len(struct)], type=pa.int64())
        columns[table] = pa.LargeListArray.from_arrays(offsets, struct)
    meta = {
        "version": SPOOL_VERSION,
        "run_id": result.run.run_id,
        "production_restored": result.production_restored,
        "host": None
        if host is None
        else {"name": host.name, "kind": host.kind, "description": host.description},
        "spooled_at": datetime.now(UTC).isoformat(),
    }
    table = pa.table(columns).replace_schema_metadata({_META_KEY: json.dumps(meta).encode()})
    final = spool_path(directory, result.run.run_id)

    def fill(f: BinaryIO) -> None:
        with pa.ipc.new_file(f, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
            w.write_table(table)

    # a temporary file renamed into place, no link followed (strix_pipeline.safe_write)
    return write_file(final, fill, create_folder=True)


def read_spool(path: Path) -> Spooled:
    """The run a spool file holds, exactly as written; :class:`SpoolUnreadable` when it is not one."""
    try:
        # a regular file only: no link followed, and a FIFO neither opened for good nor read (it would block)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb", closefd=True) as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SpoolUnreadable(
                    f"{path}: not a regular file (a link, a FIFO, a folder): not a spool file"
                )
            reader = pa.ipc.open_file(pa.BufferReader(f.read()))
            table = reader.read_all()
            raw = (reader.schema.metadata or {}).get(_META_KEY)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SpoolUnreadable(f"{path}: a symbolic link, not a spool file") from e
        raise SpoolUnreadable(f"{path}: not a readable spool file ({type(e).__name__}: {e})") from e
    except pa.ArrowException as e:
        raise SpoolUnreadable(f"{path}: not a readable spool file ({type(e).__name__}: {e})") from e
    if raw is None:
        raise SpoolUnreadable(f"{path}: no {_META_KEY.decode()} metadata: not a strix spool file")
    try:
        meta = json.loads(raw)
        version = meta["version"]
    except (ValueError, KeyError, TypeError) as e:
        raise SpoolUnreadable(f"{path}: its {_META_KEY.decode()} metadata is not readable: {e}") from e
    if version != SPOOL_VERSION:
        raise SpoolUnreadable(f"{path}: spool format version {version!r}; this code reads {SPOOL_VERSION}")
    columns = set(table.column_names)
    if table.num_rows != 1 or not set(_TABLES) - _LATER_TABLES <= columns <= set(_TABLES):
        raise SpoolUnreadable(
            f"{path}: expected one row with columns {', '.join(_TABLES)}; "
            f"found {table.num_rows} rows with {', '.join(table.column_names)}"
        )
    parts: dict[str, list[Any]] = {}
    for name, (cls, _) in _TABLES.items():
        if name not in columns:
            parts[name] = []
            continue
        dicts = table.column(name).combine_chunks().values.to_pylist()
        try:
            parts[name] = [cls(**d) for d in dicts]
        except TypeError as e:  # a field this code does not know, or one it needs and the file lacks
            raise SpoolUnreadable(f"{path}: the {name} rows do not match {cls.__name__}: {e}") from e
    if len(parts["runs"]) != 1:
        raise SpoolUnreadable(f"{path}: {len(parts['runs'])} runs rows; a spool file holds one run")
    for name, rows in parts.items():  # the value rules of `strix import`, the same for a spool file
        for row in rows:
            refused = refused_value(row)
            if refused is not None:
                field_name, value, says = refused
                raise SpoolUnreadable(
                    f"{path}: {name}: {field_name} = {value!r} is refused: {field_name} must be {says}"
                )
    host = meta.get("host")
    result = RunResult(
        run=parts["runs"][0],
        requests=RequestTable(parts["requests"]),
        aggregates=parts["aggregates"],
        memory=parts["memory_samples"],
        server_metrics=parts["server_metrics"],
        quality=parts["quality_answers"],
        production_restored=meta.get("production_restored"),
    )
    return Spooled(
        result=result,
        host=HostFacts(host["name"], host.get("kind"), host.get("description")) if host else None,
        spooled_at=datetime.fromisoformat(meta["spooled_at"]),
    )


def load_one(wh: Warehouse, result: RunResult, host: HostFacts | None) -> None:
    if host is not None:
        wh.upsert_host(host.name, host.kind, host.description)
    wh.load_run(result)


def drain(
    wh: Warehouse,
    directory: Path,
    *,
    skip: Collection[Path] = (),
    on_file: Callable[[Path, Spooled | None], None] | None = None,
) -> DrainReport:
    """Load every pending spool file in ``directory`` into the open writer ``wh``, oldest first, each
    deleted once its load committed. A file that is not a spool file this code can load (a link, a
    FIFO, a damaged file, a value the import rules refuse) is moved aside (``<name>.refused``) and
    reported; a warehouse failure raises (what was loaded so far is committed and deleted, the rest
    stays). One writer drains a folder at a time: while another holds its lock, this one loads none."""
    report = DrainReport()
    with _drain_lock(directory) as held:
        if not held:
            return report
        for path in pending(directory):
            if path in skip:
                continue
            try:
                spooled = read_spool(path)
            except SpoolUnreadable as e:
                report.unreadable.append((path, f"{e}; {_aside(path)}"))
                if on_file is not None:
                    on_file(path, None)
                continue
            try:
                load_one(wh, spooled.result, spooled.host)
            except WarehouseUnavailable:
                raise  # the warehouse itself: no other file would load either
            except WarehouseError as e:
                # this file's rows -- one bad file must not block every load after it
                report.unreadable.append((path, f"{e}; it stays where it is"))
                if on_file is not None:
                    on_file(path, None)
                continue
            path.unlink(missing_ok=True)
            report.loaded.append((path, spooled.result.run.run_id))
            if on_file is not None:
                on_file(path, spooled)
    return report


def _aside(path: Path) -> str:
    """Move a file that is no spool file out of the way (renamed, a link itself, never what it points
    to); what was done, as words for the report."""
    aside = path.with_name(path.name + REFUSED_SUFFIX)
    try:
        os.rename(path, aside)
    except OSError as e:
        return f"it could not be moved aside ({e}) and stays where it is"
    return f"moved aside to {aside}"


@contextlib.contextmanager
def _drain_lock(directory: Path) -> Iterator[bool]:
    """Whether this process holds the folder's drain lock, a lock on the folder itself (not waited
    for: the holder loads the files); on a DuckLake several writers may drain one shared folder."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        yield True  # no folder (nothing to drain), or one this process cannot open: as before
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def store_run(
    result: RunResult,
    *,
    spool_directory: Path,
    open_writer: Callable[[], AbstractContextManager[Warehouse]],
    warehouse_path: Target | None = None,
    host: HostFacts | None = None,
) -> StoreReport:
    """Spool ``result``, then load the older spool files and ``result`` into the warehouse.

    ``open_writer`` opens the warehouse for writing (its lock retry bounds the wait for another
    writer). Raises :class:`RunNotStored` when the warehouse does not take the run; its records are
    then in ``RunNotStored.spool``. ``warehouse_path`` names the warehouse (a file or a DuckLake) in
    the report and in ``RunNotStored.warehouse``; by default the one ``open_writer`` opened, which a
    writer that could not open (its error names what it tried) leaves ``None``."""
    run_id = result.run.run_id
    spool: Path | None = None
    spool_error = ""
    where = warehouse_path
    try:
        spool = write_spool(result, spool_directory, host)
    except (OSError, WarehouseError) as e:  # the warehouse may still take it: try, and say so if not
        spool_error = f"{type(e).__name__}: {e}"
    try:
        with open_writer() as wh:
            where = where or wh.path
            drained = drain(wh, spool_directory, skip={spool} if spool else ())
            load_one(wh, result, host)
    except WarehouseError as e:
        if spool is not None:
            kept = (
                f"its records are kept in {spool} and are loaded by the next benchmark load or by "
                f"`strix load-spool`"
            )
        else:
            kept = (
                f"it could not be spooled either ({spool_error} writing to {spool_directory}): "
                "its records are only in this process"
            )
        raise RunNotStored(
            f"run {run_id} was not loaded into the warehouse: {e}; {kept}",
            run_id=run_id,
            warehouse=where,
            spool=spool,
        ) from e
    if spool is not None:
        with contextlib.suppress(OSError):  # left behind, it is loaded again, to the same rows
            spool.unlink(missing_ok=True)
    return StoreReport(
        run_id=run_id, warehouse=where or wh.path, drained=drained, spool_error=spool_error or None
    )
