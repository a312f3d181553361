"""How long a run is expected to take, from the durations of its series given as arguments.

The median of the series' last runs that got as far as the engine, else :data:`DEFAULT_RUN_S`
(the profile's estimate before there is a run). Reading those durations from the warehouse is the
caller's (``warehouse.past_runs.history_durations``): planning takes them as arguments.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from strix_pipeline.usable import DEFERRED

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


def estimate_error(est: Estimate, took_s: float) -> str:
    off = took_s - est.seconds
    pct = f" ({off / est.seconds:+.0%})" if est.seconds > 0 else ""
    return f"estimated {est.describe()}, took {took_s / 60:.1f} min: off by {off / 60:+.1f} min{pct}"
