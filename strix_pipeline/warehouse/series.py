"""What change detection reads from the warehouse and the one statement it writes besides its rows:
the runs behind every series, the host facts of a few runs, and the retirement of provisional changes
the next detection no longer finds. Rows in, rows out; the series themselves are the analysis's
(analysis/series.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strix_pipeline.warehouse.facade import Warehouse

# Runs that produced numbers (the read model's `usable`); a failed run is a result elsewhere, never a
# point in a trend. A bisection's runs are probes of one release each, not points of the series they
# search (analysis/bisect/): they would move the change they are bisecting.
SERIES_AGGREGATES_SQL = """
SELECT run_id, host, engine, fingerprint, image_version, image_tag, image_digest,
       version_order, started_at, scenario, level,
       ttft_p95_ms, tpot_p95_ms, output_tokens_per_s, prefill_tokens_per_s, decode_tokens_per_s
FROM v_run_aggregates
WHERE usable AND requests_ok > 0 AND run_id NOT IN (SELECT run_id FROM v_bisection_runs)
"""

SERIES_MEMORY_SQL = """
SELECT run_id, host, engine, fingerprint, image_version, image_tag, image_digest,
       version_order, started_at, held_bytes
FROM v_run_base
WHERE usable AND held_bytes IS NOT NULL AND run_id NOT IN (SELECT run_id FROM v_bisection_runs)
"""

# A provisional change that the next run did not repeat was a blip: it goes. Confirmed or acknowledged
# ones stay as history even when a later detection no longer reports them.
RETIRE_PROVISIONAL_SQL = """
DELETE FROM changes
WHERE status = 'provisional' AND ack_status = 'active' AND NOT list_contains(?, change_id)
"""


def aggregate_rows(wh: Warehouse) -> list[dict[str, Any]]:
    """Every usable run's aggregates, one row per run, scenario and level."""
    return list(wh.query_df(SERIES_AGGREGATES_SQL).iter_rows(named=True))


def memory_rows(wh: Warehouse) -> list[dict[str, Any]]:
    """Every usable run's held memory."""
    return list(wh.query_df(SERIES_MEMORY_SQL).iter_rows(named=True))


def run_facts(wh: Warehouse, run_ids: list[str], columns: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``columns`` of the runs table for each of ``run_ids``, by run id."""
    if not run_ids:
        return {}
    sql = f"SELECT run_id, {', '.join(columns)} FROM runs WHERE list_contains(?, run_id)"
    return {r["run_id"]: r for r in wh.query_df(sql, [run_ids]).iter_rows(named=True)}


def retire_provisional(wh: Warehouse, found: list[str]) -> None:
    """Delete the active provisional changes whose ids are not among ``found``."""
    # a sentinel keeps the list typed when nothing was found
    wh.con.execute(RETIRE_PROVISIONAL_SQL, [found or [""]]).fetchall()
