"""The built-in port agrees with Apache Otava's compute_change_points (otava is installed by make test)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import need

from strix_pipeline.stats.changepoints import OTAVA_AVAILABLE, find_change_points


@pytest.fixture(autouse=True)
def _otava() -> None:
    # make test installs it: in CI a missing otava is a broken install, not a reason to skip
    need(OTAVA_AVAILABLE, "apache-otava", "pip install --no-deps apache-otava==0.8.0")


def test_port_agrees_with_otava():
    agree = 0
    n_series = 300
    for seed in range(n_series):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(5, 40))
        x = 100 * (1 + 0.01 * rng.standard_normal(n))
        if seed % 2:
            k = int(rng.integers(1, n))
            x[k:] *= 1 + rng.choice([-1, 1]) * rng.uniform(0.02, 0.15)
        ours = [c.index for c in find_change_points(x, min_magnitude_pct=3, use_otava=False)]
        theirs = [c.index for c in find_change_points(x, min_magnitude_pct=3, use_otava=True)]
        agree += ours == theirs
    assert agree / n_series >= 0.95


def test_port_finds_the_same_step_with_stats():
    x = 100 * (1 + 0.01 * np.random.default_rng(0).standard_normal(20))
    x[12:] *= 1.08
    (a,) = find_change_points(x, use_otava=False)
    (b,) = find_change_points(x, use_otava=True)
    assert a.index == b.index == 12
    assert a.pvalue == pytest.approx(b.pvalue, rel=1e-6)
    assert a.magnitude_pct == pytest.approx(b.magnitude_pct, rel=1e-9)
