"""Change points under a host that drifts: weekly figures that are not independent (AR(1)) must not
confirm false steps, a true step is still found, and a canary figure of too few runs sets no floor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from scipy.stats import ttest_ind

from strix_pipeline.analysis.changepoints import changes_in_series
from strix_pipeline.analysis.floor import MEASURED, MIN_FIGURE_RUNS, OWN, magnitude_floor
from strix_pipeline.analysis.series import Series, SeriesPoint
from strix_pipeline.config import ChangeDetectionConfig
from strix_pipeline.stats.changepoints import dependent_ttest, lag1_dependence

CFG = ChangeDetectionConfig()
MONDAY = datetime(2026, 1, 5, 3, tzinfo=UTC)
QUARTER = 13  # weeks
QUARTERS = 300


def drifting(rng: np.random.Generator, phi: float, sd: float = 0.03, step: float = 0.0) -> Series:
    """A quarter of weekly single runs of new releases: AR(1) host drift of marginal ``sd`` (phi the
    week-to-week correlation), 1 % run noise, and a true ``step`` (a fraction) from week 7 on."""
    drift = np.zeros(QUARTER)
    drift[0] = rng.normal(0, sd)
    for w in range(1, QUARTER):
        drift[w] = phi * drift[w - 1] + rng.normal(0, sd * np.sqrt(1 - phi**2))
    points = [
        SeriesPoint(
            f"r{w}",
            f"b{w:03d}",
            f"{w:06d}",
            MONDAY + timedelta(weeks=w),
            100.0 * (1 + drift[w] + rng.normal(0, 0.01)) * (1 - step * (w >= 7)),
        )
        for w in range(QUARTER)
    ]
    return Series("fp/decode", "llamacpp", "local", "decode", 1, "decode_tokens_per_s", points)


def confirmed_share(phi: float, step: float = 0.0, sd: float = 0.03) -> float:
    rng = np.random.default_rng(20261207)
    found = 0
    for _ in range(QUARTERS):
        changes = changes_in_series(drifting(rng, phi, sd, step), CFG, now=MONDAY + timedelta(weeks=14))
        found += any(c.status == "confirmed" for c in changes)
    return found / QUARTERS


def test_a_drifting_host_confirms_few_false_steps_per_quarter() -> None:
    # measured before the dependence was allowed for: 10-13 % of quarters at phi 0.6
    assert confirmed_share(0.6) <= 0.05
    assert confirmed_share(0.0) <= 0.02


def test_a_true_step_is_still_found() -> None:
    assert confirmed_share(0.0, step=0.10, sd=0.02) >= 0.75


def test_dependence_widens_the_test_and_independence_is_students() -> None:
    before, after = [100.0, 101.0, 99.0, 100.5, 99.5], [103.0, 104.0, 102.0, 103.5, 102.5]
    p0 = dependent_ttest(before, after, 0.0)
    assert p0 == pytest.approx(ttest_ind(before, after).pvalue, rel=1e-6)  # Student's pooled t-test
    assert dependent_ttest(before, after, 0.6) > p0 * 10
    assert lag1_dependence([1, 2, 3, 4, 5, 6, 7, 8]) > 0.5  # a trend is dependence
    assert lag1_dependence([1, -1] * 6) == 0.0  # negative dependence never helps a test


def test_a_canary_figure_of_too_few_runs_sets_no_floor() -> None:
    points = [SeriesPoint(f"r{i}", f"v{i}", f"{i}", MONDAY, 100.0 + (i % 2)) for i in range(8)]
    assert magnitude_floor(points, CFG, 0.001, MIN_FIGURE_RUNS).source == MEASURED
    few = magnitude_floor(points, CFG, 0.001, MIN_FIGURE_RUNS - 1)
    assert few.source == OWN and few.pct > CFG.min_magnitude_pct
