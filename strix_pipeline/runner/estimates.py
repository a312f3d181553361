"""A series' expected duration, read from the warehouse before its run: the caller reads it once and
passes it on (the night's admission, the run's own window check and its estimate error alike)."""

from __future__ import annotations

from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.estimate import DEFAULT_RUN_S, Estimate, estimate
from strix_pipeline.runner.target import BenchmarkTarget
from strix_pipeline.warehouse import Warehouse, WarehouseMissing
from strix_pipeline.warehouse.past_runs import history_durations


def read_estimate(config: StrixConfig, target: BenchmarkTarget) -> Estimate:
    """The target's series' estimate from the warehouse (read-only); an unreadable warehouse gives the
    default, saying why -- a run is never refused for want of its history."""
    series = (target.host, target.engine, target.model, target.profile)
    try:
        with Warehouse.open_reader(config.warehouse_target(), lock_retry_s=5.0) as wh:
            return estimate(history_durations(wh, *series))
    except WarehouseMissing:  # nothing loaded yet: no history, as for a new series
        return estimate([])
    except Exception as e:  # noqa: BLE001 - no file yet, a lock held by a load, a DuckLake down: the default
        return Estimate(DEFAULT_RUN_S, f"default (history not read: {type(e).__name__})")
