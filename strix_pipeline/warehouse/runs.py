"""Run loads: each run's rows in every run table, one transaction per load, a reload replaces the run.

A load converts everything to Arrow first (a bad value fails before anything is touched), then in ONE
transaction deletes any earlier load of the same run_ids and inserts the new rows; the hosts' rows
are refreshed from the runs in a second, small transaction (see load_runs for why). A load that
replaced or a delete that removed rows checkpoints with vacuuming afterwards
(:func:`~strix_pipeline.warehouse.connection.reclaim`), so the space comes back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

from strix_pipeline.fingerprint import run_fingerprint
from strix_pipeline.records import (
    LevelAggregate,
    MemorySample,
    QualityAnswer,
    RequestRecord,
    RunRecord,
    RunResult,
    ServerMetricSample,
)
from strix_pipeline.warehouse import arrow  # by module, so the scale benchmark can time its conversions
from strix_pipeline.warehouse.connection import WarehouseError, in_transaction, insert, reclaim
from strix_pipeline.warehouse.hosts import refresh_hosts

# Tables holding one run's rows, in load order (runs first, so a reader joining on runs never sees
# orphans; all of it is one transaction anyway).
RUN_TABLES: dict[str, type] = {
    "runs": RunRecord,
    "requests": RequestRecord,
    "aggregates": LevelAggregate,
    "memory_samples": MemorySample,
    "server_metrics": ServerMetricSample,
    "quality_answers": QualityAnswer,
}

# The RunResult field holding each run table's rows (runs and requests are built apart).
_RESULT_FIELD = {
    "aggregates": "aggregates",
    "memory_samples": "memory",
    "server_metrics": "server_metrics",
    "quality_answers": "quality",
}


def load_runs(con: duckdb.DuckDBPyConnection, results: Sequence[RunResult]) -> None:
    """Load several runs in ONE transaction; each replaces its earlier load. All or nothing."""
    if not results:
        return
    ids = [r.run.run_id for r in results]
    if len(set(ids)) != len(ids):
        raise WarehouseError("the same run_id appears twice in one load")
    # Conversion first, outside the transaction: a bad value fails before anything is touched.
    # The GC stays paused through the inserts as well (see arrow.gc_paused).
    with arrow.gc_paused():
        tables: dict[str, pa.Table] = {}
        for table, cls in RUN_TABLES.items():
            if table == "requests":
                tables[table] = arrow.requests_table(results)
                continue
            rows: list[Any] = []
            for res in results:
                part = [_with_fingerprint(res.run)] if table == "runs" else getattr(res, _RESULT_FIELD[table])
                arrow.check_run_ids(res.run.run_id, cls, list(map(arrow.RUN_ID, part)))
                rows.extend(part)
            tables[table] = arrow.records_table(cls, rows)

        def load() -> bool:
            replaced = delete_runs(con, ids)
            for table, data in tables.items():
                if data.num_rows:
                    insert(con, table, data)
            return replaced

        replaced = in_transaction(con, load)
        # The hosts' rows in a transaction of their own, after the runs: on a shared (DuckLake)
        # warehouse every load updates its host's row, and an update conflicts with any other
        # writer's change to the hosts table, so in the load's transaction it made concurrent loads
        # of different Boxes conflict and rewrite all their data files on each retry (measured: 10
        # retries for 4 writers x 3 runs). Here only this small MERGE is run again. The hosts table
        # is derived from runs (refresh_hosts reads them), so a crash between the two leaves a host's
        # facts a load behind until its next load, never a run unloaded or half loaded.
        hosts = sorted({r.run.host for r in results})
        try:
            in_transaction(con, lambda: refresh_hosts(con, hosts))
        except (duckdb.Error, WarehouseError) as e:
            # The same class with the context added: a commit conflict or a full disk stays one (the
            # spool drain stops on WarehouseUnavailable), a DuckDB error stays for explain() to name.
            raise type(e)(
                f"run(s) {', '.join(ids)} loaded, but refreshing the rows of host(s) "
                f"{', '.join(hosts)} failed "
                f"(the next load of the host refreshes them; loading these runs again replaces them): {e}"
            ) from e
    if replaced:
        reclaim(con)


def delete_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Remove a run from every table (one transaction)."""
    deleted = in_transaction(con, lambda: delete_runs(con, [run_id]))
    if deleted:
        reclaim(con)


def delete_runs(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> bool:
    """Delete these runs' rows from every run table (inside the caller's transaction); True when any
    of them was there."""
    # Only runs present in `runs` can have rows elsewhere (every load is one transaction), so new
    # run ids skip the scans of the large tables.
    present = [
        r[0]
        for r in con.execute("SELECT run_id FROM runs WHERE list_contains(?, run_id)", [run_ids]).fetchall()
    ]
    if not present:
        return False
    for table in RUN_TABLES:
        con.execute(f"DELETE FROM {table} WHERE list_contains(?, run_id)", [present]).fetchall()
    return True


def run_ids(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at").fetchall()]


def _with_fingerprint(run: RunRecord) -> RunRecord:
    # A run without a fingerprint would join no series; the one fingerprint function can derive it
    # from the run's own fields, so the stored copy gets it (the caller's object is not touched).
    if run.fingerprint:
        return run
    return dataclasses.replace(run, fingerprint=run_fingerprint(run))


def measured_digests(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str, str]]:
    """(host, model profile, image digest) of every stored run that measured its suite (status ok)."""
    rows = con.execute(
        "SELECT DISTINCT host, model_profile, image_digest FROM runs WHERE status = 'ok' AND "
        "image_digest IS NOT NULL"
    ).fetchall()
    return {(h, m, d) for h, m, d in rows}
