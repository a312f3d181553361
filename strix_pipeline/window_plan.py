"""The warehouse's side of planning: the durations and the measured runs :mod:`strix_pipeline.planning`
takes as arguments, read here; the rules themselves live there (re-exported under their old names).

- :func:`history_durations` / :func:`read_estimate`: a run's duration from the history of its series;
- :func:`measured_runs`: the one account of what is measured (planning.measured), for the sensor,
  the weekly schedule and `strix plan --week` alike;
- :func:`check_fits`: the runner's refusal (``deferred``) of a run whose estimate does not fit, built
  on :func:`strix_pipeline.planning.window.check_fit`, which returns a value.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning.estimate import (
    DEFAULT_RUN_S,
    HISTORY_RUNS,
    NOT_A_DURATION,
    Estimate,
    estimate,
    estimate_error,
)
from strix_pipeline.planning.measured import DeferredRun, MeasuredRun
from strix_pipeline.planning.priority import run_priority
from strix_pipeline.planning.window import Window, check_fit
from strix_pipeline.usable import DEFERRED
from strix_pipeline.warehouse import Warehouse, WarehouseMissing

__all__ = [
    "DEFAULT_RUN_S",
    "HISTORY_RUNS",
    "NOT_A_DURATION",
    "Estimate",
    "check_fits",
    "estimate",
    "estimate_error",
    "history_durations",
    "measured_runs",
    "read_estimate",
    "run_priority",
]


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


def read_estimate(config: StrixConfig, host: str, engine: str, model_profile: str, profile: str) -> Estimate:
    """The series' estimate from the warehouse (read-only); an unreadable warehouse gives the default,
    saying why -- a run is never refused for want of its history."""
    try:
        with Warehouse.open(config.warehouse_target(), read_only=True, lock_retry_s=5.0) as wh:
            return estimate(history_durations(wh, host, engine, model_profile, profile))
    except WarehouseMissing:  # nothing loaded yet: no history, as for a new series
        return estimate([])
    except Exception as e:  # noqa: BLE001 - no file yet, a lock held by a load, a DuckLake down: the default
        return Estimate(DEFAULT_RUN_S, f"default (history not read: {type(e).__name__})")


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


def check_fits(est: Estimate, window_start: datetime, window_hours: float, now: datetime) -> float:
    """Refuse (``deferred``) a run that would overrun the window; returns the seconds left in it."""
    window = Window(window_start, window_start + timedelta(hours=window_hours))
    fit = check_fit(est.seconds, est.describe(), window, now)
    if not fit.fits:
        raise EngineStartError(DEFERRED, f"{fit.reason}; production was not stopped")
    return fit.left_s
