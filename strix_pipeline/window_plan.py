"""Fitting a week's runs into a host's maintenance window.

- :func:`estimate`: a run's duration from the history of its series (host, engine, model profile,
  scenario profile): the median of its last runs that got as far as the engine, or
  :data:`DEFAULT_RUN_S` before there is one;
- :func:`check_fits`: a run whose estimate does not fit the time left in the window is ``deferred``
  to the next window (a status of its own: neither a failure nor a success, never evidence), before
  anything is pulled or stopped;
- :func:`estimate_error`: after each run, how far the estimate was off, for the run's log;
- :func:`run_priority`: the order the decision needs them in (the newest official candidate first --
  C1 --, then the baseline engine production serves, then the rest), as a queue priority.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.records import ImageRecord
from strix_pipeline.usable import DEFERRED
from strix_pipeline.warehouse import Warehouse, WarehouseMissing

# Before a series has a run: a Box run pulls an image of tens of GB, loads a 30B-120B model and runs
# the standard suite; the field report's runs took 30-60 min.
DEFAULT_RUN_S = 45 * 60.0
HISTORY_RUNS = 10  # the newest runs of the series the median is taken over
# statuses whose duration says nothing of a run's length: nothing was pulled or started
NOT_A_DURATION = ("failed_guard", DEFERRED, "cancelled")


@dataclass(frozen=True)
class Estimate:
    seconds: float
    basis: str  # "median of 4 runs" | "default (no run of this series yet)"

    def describe(self) -> str:
        return f"{self.seconds / 60:.0f} min ({self.basis})"


def estimate(durations_s: list[float]) -> Estimate:
    if not durations_s:
        return Estimate(DEFAULT_RUN_S, "default (no run of this series yet)")
    return Estimate(float(statistics.median(durations_s)), f"median of {len(durations_s)} run(s)")


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


def check_fits(est: Estimate, window_start: datetime, window_hours: float, now: datetime) -> float:
    """Refuse (``deferred``) a run that would overrun the window; returns the seconds left in it."""
    end = window_start + timedelta(hours=window_hours)
    left = (end - now).total_seconds()
    if est.seconds > left:
        raise EngineStartError(
            DEFERRED,
            f"estimated {est.describe()}, the window has {max(left, 0) / 60:.0f} min left (until "
            f"{end:%Y-%m-%d %H:%M %Z}): deferred to the next window; production was not stopped",
        )
    return left


def estimate_error(est: Estimate, took_s: float) -> str:
    off = took_s - est.seconds
    pct = f" ({off / est.seconds:+.0%})" if est.seconds > 0 else ""
    return f"estimated {est.describe()}, took {took_s / 60:.1f} min: off by {off / 60:+.1f} min{pct}"


def run_priority(config: StrixConfig, image: ImageRecord, images: list[ImageRecord]) -> int:
    """Higher runs first: 2 the newest image of the candidate engine's official sources (C1 needs it),
    1 the baseline engine's images (what production serves, the pair C3 and C5 compare against), 0 the
    rest. ``images`` are the images requested with it (to tell the newest)."""
    d = config.decision
    if image.engine == d.candidate_engine:
        engine = config.engines.get(image.engine)
        official = {(s.registry, s.repository) for s in (engine.images if engine else []) if s.official}

        def is_official(i: ImageRecord) -> bool:
            return i.engine == image.engine and (i.registry, i.repository) in official

        if is_official(image):
            newest = max((i for i in images if is_official(i)), key=lambda i: i.sort_key or "", default=None)
            if newest is not None and newest.digest == image.digest:
                return 2
    if image.engine == d.baseline_engine:
        return 1
    return 0
