"""A consistent copy of the warehouse, kept ``keep`` deep: what ``strix backup`` and the weekly backup
schedule make.

A DuckDB file is copied under the project's own writer open: the writer holds DuckDB's exclusive file
lock (no run or load can write while the copy is made), ``CHECKPOINT`` first folds the write-ahead
log into the file, so the file alone is the whole database at that moment. The copy is written beside
its final name and renamed once complete: a backup directory never holds half a copy under a
backup's name.

A DuckLake warehouse is its catalog (PostgreSQL) and Parquet data files DuckLake only ever adds: the
catalog is what changes, so it is what is copied, with ``pg_dump`` in its custom format (one
transaction: consistent), the DSN handed to it in libpq's environment variables, never on its
command line. The data files stay where they are (``data_path``, the owner's to back up as files).

Retention: the newest ``keep`` copies of this warehouse in the directory stay, older ones go.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from strix_pipeline.config import DuckLakeTarget
from strix_pipeline.warehouse.errors import WarehouseError
from strix_pipeline.warehouse.facade import Warehouse

STAMP = "%Y%m%dT%H%M%S%fZ"  # sorts as it was made
# libpq's keywords -> its environment variables (the DSN's secrets stay out of argv)
PG_ENV = {
    "host": "PGHOST",
    "hostaddr": "PGHOSTADDR",
    "port": "PGPORT",
    "dbname": "PGDATABASE",
    "user": "PGUSER",
    "password": "PGPASSWORD",
    "sslmode": "PGSSLMODE",
    "passfile": "PGPASSFILE",
    "connect_timeout": "PGCONNECT_TIMEOUT",
    "options": "PGOPTIONS",
    "application_name": "PGAPPNAME",
}


@dataclass(frozen=True)
class Backup:
    path: Path  # the copy made
    removed: list[Path] = field(default_factory=list)  # older copies retention removed

    def describe(self) -> str:
        size = self.path.stat().st_size
        gone = f"; removed {len(self.removed)} older: {', '.join(p.name for p in self.removed)}"
        return f"backup {self.path} ({size:,} bytes)" + (gone if self.removed else "")


def backup_name(stem: str, suffix: str, at: datetime) -> str:
    return f"{stem}-{at.astimezone(UTC).strftime(STAMP)}{suffix}"


def backups_of(directory: Path, stem: str, suffix: str) -> list[Path]:
    """This warehouse's copies in ``directory``, oldest first (their names carry the time)."""
    pattern = re.compile(re.escape(stem) + r"-\d{8}T\d{12}Z" + re.escape(suffix))
    return sorted(p for p in directory.glob(f"{stem}-*{suffix}") if pattern.fullmatch(p.name))


def keep_newest(directory: Path, stem: str, suffix: str, keep: int) -> list[Path]:
    """Removes all but the newest ``keep`` copies; returns what it removed."""
    if keep < 1:
        raise ValueError("keep at least one backup")
    old = backups_of(directory, stem, suffix)[:-keep]
    for p in old:
        p.unlink()
    return old


def backup_duckdb(path: Path, directory: Path, keep: int, *, lock_retry_s: float = 60.0) -> Backup:
    """A copy of the DuckDB warehouse at ``path`` in ``directory``, made under the writer's lock after a
    checkpoint; then retention."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / backup_name(path.stem, path.suffix or ".duckdb", datetime.now(UTC))
    partial = target.with_name(target.name + ".partial")
    with Warehouse.open(path, read_only=False, lock_retry_s=lock_retry_s) as wh:
        wh.con.execute("CHECKPOINT")
        try:
            shutil.copyfile(path, partial)
            os.replace(partial, target)
        except OSError as e:
            partial.unlink(missing_ok=True)
            raise WarehouseError(f"{path}: the backup to {directory} failed: {e}") from e
    return Backup(target, keep_newest(directory, path.stem, path.suffix or ".duckdb", keep))


def dsn_env(dsn: str) -> dict[str, str]:
    """A libpq key=value DSN as libpq's environment variables (quoted values unquoted)."""
    out: dict[str, str] = {}
    for key, value in re.findall(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", dsn):
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        if key not in PG_ENV:
            raise WarehouseError(f"the catalog DSN's {key!r} has no libpq environment variable")
        out[PG_ENV[key]] = value
    return out


def backup_ducklake(
    target: DuckLakeTarget, directory: Path, keep: int, *, pg_dump: str = "pg_dump"
) -> Backup:
    """``pg_dump`` of the DuckLake catalog (custom format) in ``directory``; then retention."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = "ducklake-catalog"
    out = directory / backup_name(stem, ".pgdump", datetime.now(UTC))
    partial = out.with_name(out.name + ".partial")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | dsn_env(target.catalog_dsn)
    done = subprocess.run(
        [pg_dump, "--format=custom", "--no-password", f"--file={partial}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        said = done.stderr.strip()[-500:].replace(target.catalog_dsn, f"${target.catalog_env or 'DSN'}")
        raise WarehouseError(f"{target}: pg_dump of the catalog exited {done.returncode}: {said}")
    os.replace(partial, out)
    return Backup(out, keep_newest(directory, stem, ".pgdump", keep))


KEEP = 4  # a month of weekly copies


def default_directory(target: Path | DuckLakeTarget, artifacts: Path) -> Path:
    """Where copies go unless told: beside the DuckDB file (``backups/``), or under the artifacts for
    a DuckLake catalog. Another disk is better: ``strix backup --to``."""
    if isinstance(target, DuckLakeTarget):
        return artifacts / "backups"
    return Path(target).parent / "backups"


def backup(target: Path | DuckLakeTarget, directory: Path, keep: int = KEEP) -> Backup:
    """The warehouse's backup, whichever it is."""
    if isinstance(target, DuckLakeTarget):
        return backup_ducklake(target, directory, keep)
    return backup_duckdb(Path(target), directory, keep)
