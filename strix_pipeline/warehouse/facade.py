"""The :class:`Warehouse` object: one open file, its mode, and one method per thing people do with it.

Each method checks the mode and hands the connection to the module of its concern (runs, images,
decisions, changes, parquet, schema); the rules live there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from strix_pipeline.config import DuckLakeTarget
from strix_pipeline.records import CriterionResult, ImageRecord, RunResult
from strix_pipeline.warehouse import (
    bisections,
    changes,
    comparisons,
    decisions,
    hosts,
    noise,
    parquet,
    production_reads,
    runs,
    schema,
    traces,
)
from strix_pipeline.warehouse import images as _images  # `images` is upsert_images' argument
from strix_pipeline.warehouse.bisections import BisectionRecord, BisectionStep
from strix_pipeline.warehouse.changes import ChangeRecord
from strix_pipeline.warehouse.comparisons import ComparisonRecord, ComparisonRun
from strix_pipeline.warehouse.connection import (
    Target,
    WarehouseError,
    WarehouseLocked,
    open_connection,
)
from strix_pipeline.warehouse.faults import explain
from strix_pipeline.warehouse.sql_names import quoted
from strix_pipeline.warehouse.view_check import check_views


class Warehouse:
    """One open warehouse: a DuckDB file, or a DuckLake lakehouse (``DuckLakeTarget``) several
    processes share. Use as a context manager; writers should close promptly.

    Writers open, write one short transaction and close (``with Warehouse.open(path) as wh:
    wh.load_run(result)``), never holding the file through a benchmark; readers open
    ``read_only=True`` (see :mod:`strix_pipeline.warehouse.connection` for why).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Target, read_only: bool) -> None:
        self.con = con
        self.path = path
        self.read_only = read_only
        self.schema_version = 0

    # ---- opening, schema ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path | DuckLakeTarget,
        *,
        read_only: bool = False,
        lock_retry_s: float = 5.0,
        on_wait: Callable[[str], None] | None = None,
        sandbox: bool = False,
        memory_limit: str | None = None,
    ) -> Warehouse:
        """Open (and, when writable, create or migrate) the warehouse at ``path``.

        While another process holds the file, retry for ``lock_retry_s`` seconds (``on_wait`` is told
        once, e.g. to show "waiting for the writer"), then raise :class:`WarehouseLocked`.

        ``sandbox=True`` (only with ``read_only=True``) is for SQL that someone typed: the connection
        reads the warehouse file and nothing else, writes nothing, and cannot change its settings
        (:data:`SANDBOX_CONFIG`, then ``lock_configuration``). ``export_parquet`` does not work on it.
        One sandboxed reader per file and process at a time. ``memory_limit`` (e.g. ``"2GB"``) bounds a
        sandbox's memory; it is locked with the rest.

        A :class:`~strix_pipeline.config.DuckLakeTarget` (``StrixConfig.warehouse_target()``) opens the
        shared lakehouse instead: no file lock to wait for (``lock_retry_s`` is unused), any number
        of readers and writers at once, the same schema, loads and sandbox.
        """
        path = path if isinstance(path, DuckLakeTarget) else Path(path)
        try:
            con = open_connection(
                path,
                read_only=read_only,
                lock_retry_s=lock_retry_s,
                on_wait=on_wait,
                sandbox=sandbox,
                memory_limit=memory_limit,
            )
        except WarehouseLocked:
            raise
        except WarehouseError as e:
            # connect() says "cannot open"; a damaged file or a full disk deserves its own words
            if isinstance(e.__cause__, duckdb.Error):
                raise explain(path, e.__cause__, "opening it") from e.__cause__
            raise
        except OSError as e:  # e.g. the directory cannot be created on a full disk
            raise explain(path, e, "opening it") from e
        wh = cls(con, path, read_only)
        try:
            wh.schema_version = schema.prepare(con, path, read_only=read_only)
            # a view or macro not the project's is refused before anything reads through it
            check_views(con, path, writable=not read_only)
        except duckdb.Error as e:
            con.close()
            raise explain(path, e, "reading its schema") from e
        except BaseException:
            con.close()
            raise
        return wh

    @classmethod
    def open_reader(
        cls,
        path: str | Path | DuckLakeTarget,
        *,
        lock_retry_s: float = 5.0,
        on_wait: Callable[[str], None] | None = None,
    ) -> Warehouse:
        """A read-only open for code that reads the stored views and tables (a report, a summary, a
        plan): of a DuckDB file, sandboxed as `strix query` is, so no file, network or extension is
        reachable from a view's SQL should one ever pass the view check. A lake's read-only open is
        sealed the same way once attached; its sandbox's private catalog copy reads inlined
        TIMESTAMPTZ values as NULL, so it is not used here.

        The sandbox's settings belong to the file's database instance, which DuckDB shares within a
        process and drops with its last connection: while the reader is open this process cannot open
        the file writable (as for any read-only open), and once it is closed a writer opens it as before.
        """
        path = path if isinstance(path, DuckLakeTarget) else Path(path)
        return cls.open(
            path, read_only=True, lock_retry_s=lock_retry_s, on_wait=on_wait, sandbox=isinstance(path, Path)
        )

    def close(self) -> None:
        try:
            self.con.close()
        except duckdb.Error:
            pass

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _writable(self) -> None:
        if self.read_only:
            raise WarehouseError(f"{self.path}: opened read-only; open it writable to change it")

    # ---- reading --------------------------------------------------------------------------------

    def table_names(self) -> list[str]:
        return schema.table_names(self.con)

    def count(self, table: str, run_id: str | None = None) -> int:
        """Rows of the project's table ``table`` (of one run, given ``run_id``)."""
        if table not in schema.project_schema().tables or table not in self.table_names():
            raise WarehouseError(f"no table {table!r}")
        name = quoted(table)
        if run_id is None:
            rows = self.con.execute(f"SELECT count(*) FROM {name}").fetchall()
        else:
            rows = self.con.execute(f"SELECT count(*) FROM {name} WHERE run_id = ?", [run_id]).fetchall()
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
        try:
            runs.load_runs(self.con, results)
        except (duckdb.Error, OSError) as e:  # the transaction rolled back: nothing of these runs is in
            what = ", ".join(r.run.run_id for r in results)
            raise explain(self.path, e, f"loading run {what}") from e

    def delete_run(self, run_id: str) -> None:
        """Remove a run from every table (one transaction)."""
        self._writable()
        runs.delete_run(self.con, run_id)

    def run_ids(self) -> list[str]:
        return runs.run_ids(self.con)

    def measured_digests(self) -> set[tuple[str, str, str]]:
        """(host, model profile, image digest) of every run stored with status ok."""
        return runs.measured_digests(self.con)

    # ---- hosts ----------------------------------------------------------------------------------

    def upsert_host(self, name: str, kind: str | None, description: str | None) -> None:
        self._writable()
        try:
            hosts.upsert_host(self.con, name, kind, description)
        except (duckdb.Error, OSError) as e:
            raise explain(self.path, e, f"recording host {name}") from e

    # ---- images ---------------------------------------------------------------------------------

    def upsert_images(self, images: list[ImageRecord]) -> None:
        """Insert or refresh images keyed by (registry, repository, tag); first_seen keeps its oldest
        value."""
        self._writable()
        _images.upsert_images(self.con, images)

    def known_images(self, engine: str | None = None) -> list[ImageRecord]:
        return _images.known_images(self.con, engine)

    def mark_images_gone(self, registry: str, repository: str, tags: list[str], at: datetime) -> None:
        self._writable()
        _images.mark_images_gone(self.con, registry, repository, tags, at)

    def record_registry_error(self, registry: str, repository: str, error: str, at: datetime) -> None:
        self._writable()
        _images.record_registry_error(self.con, registry, repository, error, at)

    # ---- decisions ------------------------------------------------------------------------------

    def save_decision(self, rows: list[CriterionResult]) -> None:
        """Store one evaluation (all rows share its evaluation_id); saving it again replaces it."""
        self._writable()
        decisions.save_decision(self.con, rows)

    # ---- change points --------------------------------------------------------------------------

    change_id = staticmethod(changes.change_id)

    def save_changes(self, rows: list[ChangeRecord]) -> None:
        """Insert or refresh change points by change_id; an acknowledgement already given is kept."""
        self._writable()
        changes.save_changes(self.con, rows)

    def list_changes(self, **filters: str | None) -> list[ChangeRecord]:
        """Change points, newest first, filtered by any of host, engine, status, ack_status,
        fingerprint and metric (see warehouse.changes.list_changes)."""
        return changes.list_changes(self.con, **filters)

    def ack_change(self, change_id: str, reason: str) -> bool:
        """Acknowledge a change (it stays, marked); False when no such change exists."""
        self._writable()
        return changes.ack_change(self.con, change_id, reason)

    # ---- bisections -----------------------------------------------------------------------------

    def save_bisection(self, row: BisectionRecord, new_steps: list[BisectionStep] | None = None) -> None:
        """Replace a bisection's row and append its new steps (warehouse.bisections)."""
        self._writable()
        bisections.save_bisection(self.con, row, new_steps or [])

    def list_bisections(self, status: str | None = None) -> list[BisectionRecord]:
        return bisections.list_bisections(self.con, status=status)

    def bisection_steps(self, bisection_id: str) -> list[BisectionStep]:
        return bisections.bisection_steps(self.con, bisection_id)

    # ---- run-to-run noise ------------------------------------------------------------------------

    def save_noise(self, rows: list[noise.NoiseRecord]) -> None:
        """Store one analysis's noise figures (warehouse.noise); saving it again replaces them."""
        if not rows:
            return
        self._writable()
        noise.save_noise(self.con, rows)

    def latest_noise(self) -> list[noise.NoiseRecord]:
        """The newest analysis's noise figures, per host and canary series."""
        return noise.latest_noise(self.con)

    # ---- imported traces ------------------------------------------------------------------------

    def save_trace(self, row: traces.TraceRecord) -> None:
        """Store an imported trace's digests and summary (warehouse.traces); its name again replaces it."""
        self._writable()
        traces.save_trace(self.con, row)

    def list_traces(self) -> list[traces.TraceRecord]:
        return traces.list_traces(self.con)

    # ---- reads of production as deployed ----------------------------------------------------------

    def save_production_read(self, row: production_reads.ProductionReadRecord) -> None:
        self._writable()
        production_reads.save_read(self.con, row)

    def last_production_read(self, host: str) -> production_reads.ProductionReadRecord | None:
        return production_reads.last_read(self.con, host)

    # ---- comparisons by pairs -------------------------------------------------------------------

    def save_comparison(self, rows: list[ComparisonRecord], runs: list[ComparisonRun]) -> None:
        """Store one comparison whole: a row per metric, a row per engine start (warehouse.comparisons)."""
        self._writable()
        comparisons.save_comparison(self.con, rows, runs)

    def uncompared_newest(self, host: str, engine: str) -> tuple[str, str] | None:
        """(previous, newest) release on ``host`` not compared by pairs yet (warehouse.comparisons)."""
        return comparisons.uncompared_newest(self.con, host, engine)

    def compared_with_itself_since(self, host: str, engine: str, release: str, since: datetime) -> bool:
        """Whether ``release`` was compared with itself by pairs since ``since`` (warehouse.comparisons)."""
        return comparisons.compared_with_itself_since(self.con, host, engine, release, since)

    def engine_comparisons(
        self, host: str, metric: str, since: datetime, until: datetime | None = None
    ) -> dict[str, ComparisonRecord]:
        """The newest engine comparison's ``metric`` per decision match-up on ``host`` since ``since``."""
        return comparisons.engine_comparisons(self.con, host, metric, since, until)

    def list_comparisons(
        self, *, limit: int | None = None, comparison_id: str | None = None
    ) -> list[ComparisonRecord]:
        """Comparison rows, newest first; ``limit`` counts comparisons, each with all its metrics."""
        return comparisons.list_comparisons(self.con, limit=limit, comparison_id=comparison_id)

    def comparison_runs(self, comparison_id: str) -> list[ComparisonRun]:
        return comparisons.comparison_runs(self.con, comparison_id)

    # ---- export ---------------------------------------------------------------------------------

    def export_parquet(self, directory: str | Path, tables: Iterable[str] | None = None) -> dict[str, Path]:
        """Write every table (or the named ones) to DIR/<table>.parquet; works on a read-only open."""
        return parquet.export_parquet(self.con, directory, tables)

    def import_parquet(self, directory: str | Path, *, replace: bool = False) -> dict[str, int]:
        """Load what :meth:`export_parquet` wrote; runs and decisions already here are refused unless
        ``replace`` (see :func:`strix_pipeline.warehouse.parquet.import_parquet`)."""
        self._writable()
        return parquet.import_parquet(self.con, directory, replace=replace)
