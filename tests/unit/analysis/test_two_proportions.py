"""stats/proportions.py: two proportions compared by Boschloo's exact test, the counts a comparison
by pairs gives (failed runs, excluded runs of its two sides)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from strix_pipeline.stats.proportions import two_proportions


def test_it_is_scipy_s_boschloo_on_the_two_by_two_table() -> None:
    for k1, n1, k2, n2 in ((0, 14, 4, 14), (3, 10, 0, 12), (5, 20, 9, 18)):
        t = two_proportions(k1, n1, k2, n2)
        table = [[k1, k2], [n1 - k1, n2 - k2]]
        assert t.p_value == pytest.approx(stats.boschloo_exact(table).pvalue)
        assert (t.rate1, t.rate2) == (k1 / n1, k2 / n2)
        assert t.difference == pytest.approx(k2 / n2 - k1 / n1)


def test_it_sees_what_fisher_s_test_misses_at_a_handful_of_runs() -> None:
    t = two_proportions(0, 14, 4, 14)  # no failed run of A, 4 of 14 of B
    assert t.p_value < 0.05 < stats.fisher_exact([[0, 4], [14, 10]]).pvalue
    assert t.higher(0.05) == 2 and two_proportions(4, 14, 0, 14).higher(0.05) == 1
    assert two_proportions(0, 10, 1, 10).higher(0.05) is None  # one failure is no evidence


def test_nothing_to_compare_is_no_evidence() -> None:
    assert two_proportions(0, 10, 0, 12).p_value == 1.0
    assert two_proportions(3, 3, 5, 5).p_value == 1.0
    assert two_proportions(0, 0, 2, 5).p_value == 1.0
    for bad in ((3, 2, 0, 1), (-1, 2, 0, 1)):
        with pytest.raises(ValueError):
            two_proportions(*bad)


def test_equal_rates_are_called_different_at_most_alpha_of_the_time() -> None:
    rng = np.random.default_rng(7)
    trials = 400
    hits = sum(
        two_proportions(int(rng.binomial(12, 0.2)), 12, int(rng.binomial(12, 0.2)), 12).p_value < 0.05
        for _ in range(trials)
    )
    assert hits / trials <= 0.05
