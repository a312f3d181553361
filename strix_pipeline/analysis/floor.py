"""The smallest step that counts on a series: max(min_magnitude_pct, noise_multiple x the noise of one
point).

That noise is the measured one when the series' host has a figure for its scenario, level and metric
(table ``noise_figures``, the canary's coefficient of variation of one run, divided by sqrt of the
median runs behind a point); otherwise the series' own noise, from the successive differences of its
points. Small steps in noisy series are what false alarms are made of.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from strix_pipeline.analysis.series import Series, SeriesPoint
from strix_pipeline.config import ChangeDetectionConfig
from strix_pipeline.warehouse.noise import NoiseRecord


def series_noise_pct(values: Sequence[float]) -> float:
    """Relative noise of a series in percent, from successive differences.

    Successive differences cancel a step (only one difference sees it) and the median ignores that
    one, so a series with a real change is not judged noisier than it is.
    """
    x = np.asarray(values, dtype=float)
    if len(x) < 3:
        return 0.0
    centre = float(np.median(np.abs(x)))
    if centre == 0:
        return 0.0
    sigma = 1.4826 * float(np.median(np.abs(np.diff(x)))) / math.sqrt(2.0)
    return sigma / centre * 100.0


def floor_pct(noise_pct: float, cfg: ChangeDetectionConfig) -> float:
    """The one rule: the smallest step that counts is max(min_magnitude_pct, noise_multiple x noise)."""
    return max(cfg.min_magnitude_pct, cfg.noise_multiple * noise_pct)


def magnitude_floor_pct(values: Sequence[float], cfg: ChangeDetectionConfig) -> float:
    """The floor of a plain series of values, on their own noise."""
    return floor_pct(series_noise_pct(values), cfg)


MEASURED = "measured"  # the floor rests on the canary's measured CV of one run
OWN = "own"  # on the series' own successive differences


@dataclass(frozen=True)
class Floor:
    """The smallest step that counts on one series, and the noise it rests on."""

    pct: float
    noise_pct: float  # the noise of one point of the series (a weekly mean), in percent
    source: str  # MEASURED | OWN
    runs_per_point: float  # the median runs behind a point

    def text(self) -> str:
        if self.source == MEASURED:
            cv = self.noise_pct * math.sqrt(self.runs_per_point)
            why = f"measured CV {cv:.2f}% of one run / sqrt({self.runs_per_point:g} runs per point)"
        else:
            why = "the series' own noise"
        return f"floor {self.pct:.2f}% (noise {self.noise_pct:.2f}% per point: {why})"


# The fewest canary runs a measured CV may rest on to set a floor: the CV of n runs is itself uncertain
# by about 1 / sqrt(2 (n - 1)) of its value (32 % at 6 runs, 53 % at 3), and a CV measured too low sets
# a floor under the noise, where false steps are found.
MIN_FIGURE_RUNS = 6


def magnitude_floor(
    points: Sequence[SeriesPoint],
    cfg: ChangeDetectionConfig,
    measured_cv: float | None = None,
    measured_runs: int | None = None,
) -> Floor:
    """max(min_magnitude_pct, noise_multiple x the noise of one point).

    ``measured_cv`` (a fraction: 0.05 is 5 %) is the coefficient of variation of one run as the canary
    measured it over ``measured_runs`` runs; a mean of n runs has that over sqrt(n), n being the median
    runs behind a point. Without it, or when it rests on fewer than :data:`MIN_FIGURE_RUNS` runs, the
    points' own successive differences are their noise.
    """
    per_point = float(np.median([p.n for p in points])) if points else 1.0
    enough = measured_runs is None or measured_runs >= MIN_FIGURE_RUNS
    if measured_cv is not None and math.isfinite(measured_cv) and measured_cv >= 0 and enough:
        noise_pct, source = measured_cv * 100.0 / math.sqrt(per_point), MEASURED
    else:
        noise_pct, source = series_noise_pct([p.value for p in points]), OWN
    return Floor(floor_pct(noise_pct, cfg), noise_pct, source, per_point)


def measured_noise_for(series: Series, figures: Sequence[NoiseRecord]) -> NoiseRecord | None:
    """The measured figure of the series' host, engine, scenario, level and metric, if any: the one of
    the series' own configuration (its fingerprint: the canary's release with the same flags and
    model) first. Another engine's canary is no figure for it: its noise is that engine's."""
    same = [
        f
        for f in figures
        if (f.host, f.engine, f.scenario, f.level, f.metric)
        == (series.host, series.engine, series.scenario, series.level, series.metric)
    ]
    if not same:
        return None
    return min(same, key=lambda f: f.fingerprint != series.fingerprint)
