"""What the runs table says about past runs, as planning takes it: the rules live in
:mod:`strix_pipeline.planning`, which takes these rows as arguments.

- :func:`history_durations`: a series' newest durations, for its estimate (planning.estimate);
- :func:`measured_runs`: the one account of what is measured (planning.measured), for the sensor,
  the weekly schedule and `strix plan --week` alike;
- :func:`deferred_runs`: the account's other half, what was deferred and not measured since.
"""

from __future__ import annotations

from strix_pipeline.planning.estimate import HISTORY_RUNS, NOT_A_DURATION
from strix_pipeline.planning.measured import DeferredRun, MeasuredRun
from strix_pipeline.usable import DEFERRED
from strix_pipeline.warehouse.facade import Warehouse


def history_durations(wh: Warehouse, host: str, engine: str, model_profile: str, profile: str) -> list[float]:
    """Wall seconds of the series' newest runs that reached the engine (pull and outage included)."""
    placeholders = ", ".join("?" for _ in NOT_A_DURATION)
    df = wh.query_df(
        f"""SELECT epoch(ended_at) - epoch(started_at) AS s FROM runs
            WHERE host = ? AND engine = ? AND model_profile = ? AND profile = ?
              AND ended_at IS NOT NULL AND status NOT IN ({placeholders})
            ORDER BY started_at DESC LIMIT {HISTORY_RUNS}""",
        [host, engine, model_profile, profile, *NOT_A_DURATION],
    )
    return [float(s) for s in df["s"].to_list() if s is not None and s >= 0]


def measured_runs(wh: Warehouse) -> list[MeasuredRun]:
    """Every (host, engine, image digest, model profile) with a run that measured its suite (``ok``),
    with the latest such run's start: the rows planning.measured reads."""
    df = wh.query_df(
        """SELECT host, engine, image_digest, model_profile, max(started_at) AS at FROM runs
           WHERE status = 'ok' AND image_digest IS NOT NULL
           GROUP BY host, engine, image_digest, model_profile"""
    )
    return [MeasuredRun(*row) for row in df.iter_rows()]


def deferred_runs(wh: Warehouse) -> list[DeferredRun]:
    """Every target deferred and not measured since, with its first deferral and how many: how long
    each has waited (the no-starvation rule, planning.priority) and whether the sensor asks again."""
    df = wh.query_df(
        f"""SELECT d.host, d.engine, d.image_digest, d.model_profile, min(d.started_at) AS first,
                   count(*) AS times FROM runs d
            WHERE d.status = '{DEFERRED}' AND d.image_digest IS NOT NULL AND NOT EXISTS (
              SELECT 1 FROM runs o WHERE o.status = 'ok' AND o.host = d.host AND o.engine = d.engine
                AND o.image_digest = d.image_digest AND o.model_profile = d.model_profile
                AND o.started_at > d.started_at)
            GROUP BY d.host, d.engine, d.image_digest, d.model_profile"""
    )
    return [DeferredRun(*row) for row in df.iter_rows()]
