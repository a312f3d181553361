"""Comparisons by pairs (stats/paired.py): the AB/BA order and its rebalancing, the paired ratio's
interval and verdict, the ladder with its spent alpha, its power on synthetic noise, and the
detectable step."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from strix_pipeline.stats.paired import (
    AB,
    ALPHA,
    BA,
    LADDER,
    compare,
    cv,
    detectable_step,
    judge,
    look_alphas,
    looks_of,
    pair_order,
    rebalance,
    sequential,
)


def _lead(orders) -> int:
    return sum(o == AB for o in orders) - sum(o == BA for o in orders)


def _prefix_leads(orders) -> list[int]:
    return [_lead(orders[:k]) for k in range(1, len(orders) + 1)]


def _lognormal(rng: np.random.Generator, cv_: float, n: int) -> np.ndarray:
    """Log-normal noise around 1 whose coefficient of variation is exactly ``cv_``."""
    return np.exp(rng.normal(0.0, math.sqrt(math.log1p(cv_**2)), n))


# ---- the order ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(13))
def test_the_order_has_as_many_ab_as_ba_and_every_prefix_is_within_one(n: int) -> None:
    order = pair_order(n, seed=7)
    assert len(order) == n and set(order) <= {AB, BA}
    assert abs(_lead(order)) == n % 2
    assert all(abs(lead) <= 1 for lead in _prefix_leads(order))


def test_the_order_is_the_same_for_a_seed_and_differs_across_seeds() -> None:
    assert pair_order(10, seed=3) == pair_order(10, seed=3)
    orders = {tuple(pair_order(10, seed=s)) for s in range(20)}
    assert len(orders) >= 10  # 32 orders are possible
    # an odd plan's extra pair is the seed's choice, not always the same side
    assert {_lead(pair_order(5, seed=s)) for s in range(20)} == {-1, 1}
    with pytest.raises(ValueError):
        pair_order(-1, seed=0)


def test_a_plan_without_failures_stands() -> None:
    order = pair_order(10, seed=1)
    assert rebalance(order, 4, []) == order[4:]
    assert rebalance(order, 0, set()) == order


def test_a_failed_pair_is_dropped_and_the_rest_evens_out_first() -> None:
    order = pair_order(10, seed=1)
    # drop the first three pairs' two of one kind: the kept one leads by one
    kind = AB if _lead(order[:4]) >= 0 else BA
    dropped = [i for i in range(4) if order[i] == kind][:2]
    kept = [o for i, o in enumerate(order[:4]) if i not in dropped]
    rest = rebalance(order, 4, dropped, seed=1)
    assert len(kept) + len(rest) == 10  # the plan still ends with its 10 pairs
    assert _lead(kept + rest) == 0
    lead = _lead(kept)
    assert lead != 0 and rest[: abs(lead)] == [BA if lead > 0 else AB] * abs(lead)
    assert all(abs(x) <= 1 for x in _prefix_leads(kept + rest)[len(kept) + abs(lead) - 1 :])
    assert rebalance(order, 4, dropped, seed=1) == rest  # the same failures re-plan the same way


def test_a_lead_beyond_the_pairs_left_is_evened_as_far_as_they_allow() -> None:
    order = [AB, AB, AB, BA]
    rest = rebalance(order, 4, [3])  # three ABs kept, one pair left to run
    assert rest == [BA] and _lead([AB, AB, AB, *rest]) == 2
    # the failures' order does not matter, only which pairs failed
    assert rebalance([AB, BA, AB], 3, [0, 1, 2], seed=5) == rebalance([AB, BA, AB], 3, [2, 1, 0], seed=5)
    assert len(rebalance([AB, BA, AB], 3, [0, 1, 2])) == 3
    with pytest.raises(ValueError):
        rebalance(order, 2, [3])  # a pair that was not run cannot have failed
    with pytest.raises(ValueError):
        rebalance(order, 5, [])


# ---- one comparison ------------------------------------------------------------------------------


def test_a_comparison_by_hand() -> None:
    """Log ratios 0, 0.1, 0.2: mean 0.1, sd 0.1; t(0.975, 2) = 4.302653 from the table; t = sqrt(3)
    and with 2 degrees of freedom p = 1 - t / sqrt(2 + t**2) = 1 - sqrt(3/5)."""
    c = compare([1.0, 1.0, 1.0], [1.0, math.exp(0.1), math.exp(0.2)], target=0.05, higher_is_better=True)
    half = 4.302653 * 0.1 / math.sqrt(3)
    assert c.n_pairs == 3
    assert c.ratio == pytest.approx(math.exp(0.1))
    assert c.low == pytest.approx(math.exp(0.1 - half), rel=1e-6)
    assert c.high == pytest.approx(math.exp(0.1 + half), rel=1e-6)
    assert c.p_value == pytest.approx(1 - math.sqrt(3 / 5))
    assert c.log_sd == pytest.approx(0.1)
    assert c.verdict == "unknown" and c.direction is None


def test_a_comparison_is_scipy_s_one_sample_t_on_the_log_ratios() -> None:
    rng = np.random.default_rng(5)
    for n in (3, 5, 10, 40):
        a = 200 * _lognormal(rng, 0.03, n)
        b = 206 * _lognormal(rng, 0.03, n)
        c = compare(list(a), list(b), target=0.05, alpha=0.01, higher_is_better=False)
        t = stats.ttest_1samp(np.log(b / a), 0.0)
        ci = t.confidence_interval(confidence_level=0.99)
        assert c.p_value == pytest.approx(t.pvalue)
        assert (c.low, c.high) == pytest.approx((math.exp(ci.low), math.exp(ci.high)))
        assert c.ratio == pytest.approx(math.exp(np.mean(np.log(b / a))))
        # the p-value and the interval are one definition
        assert (c.p_value < 0.01) == (c.low > 1 or c.high < 1)


def test_swapping_the_sides_inverts_the_ratio_and_a_common_scale_changes_nothing() -> None:
    rng = np.random.default_rng(9)
    a, b = list(100 * _lognormal(rng, 0.02, 6)), list(95 * _lognormal(rng, 0.02, 6))
    ab = compare(a, b, target=0.05, higher_is_better=True)
    ba = compare(b, a, target=0.05, higher_is_better=True)
    assert ba.ratio == pytest.approx(1 / ab.ratio)
    assert (ba.low, ba.high) == pytest.approx((1 / ab.high, 1 / ab.low))
    scaled = compare([3 * x for x in a], [3 * x for x in b], target=0.05, higher_is_better=True)
    assert (scaled.ratio, scaled.low, scaled.high) == pytest.approx((ab.ratio, ab.low, ab.high))


@pytest.mark.parametrize(
    ("ratio", "low", "high", "target", "verdict"),
    [
        (1.20, 1.10, 1.30, 0.05, "different"),
        (0.80, 0.70, 0.90, 0.05, "different"),
        (1.125, 1.01, 1.30, 0.25, "different"),  # the step exactly half the target
        (1.12, 1.01, 1.30, 0.25, "unknown"),  # real, but below half the target and not inside it
        (1.03, 1.02, 1.04, 0.05, "different"),  # a sure 3 % at a 5 % target is named, not "same"
        (1.01, 0.99, 1.03, 0.05, "same"),
        (1.0, 0.75, 1.25, 0.25, "same"),  # the interval exactly on the target's edges
        (1.0, 0.74, 1.25, 0.25, "unknown"),  # contains 1 but reaches past the target: no evidence
        (1.005, 1.001, 1.30, 0.05, "unknown"),
    ],
)
def test_the_verdict_at_its_boundaries(
    ratio: float, low: float, high: float, target: float, verdict: str
) -> None:
    assert judge(ratio, low, high, target) == verdict


def test_data_produce_each_verdict_and_the_direction_follows_what_is_better() -> None:
    rng = np.random.default_rng(11)
    a = 100 * _lognormal(rng, 0.01, 10)
    slower = compare(list(a), list(0.8 * a * _lognormal(rng, 0.01, 10)), target=0.05, higher_is_better=True)
    assert slower.verdict == "different" and slower.direction == "regression"
    assert slower.change_pct == pytest.approx(-20, abs=2)
    # the same drop in a latency is an improvement
    faster = compare(list(a), list(0.8 * a * _lognormal(rng, 0.01, 10)), target=0.05, higher_is_better=False)
    assert faster.verdict == "different" and faster.direction == "improvement"
    same = compare(list(a), list(a * _lognormal(rng, 0.005, 10)), target=0.05, higher_is_better=True)
    assert same.verdict == "same" and same.direction is None
    noisy = compare(list(a[:3]), list(a[:3] * _lognormal(rng, 0.05, 3)), target=0.05, higher_is_better=True)
    assert noisy.verdict == "unknown"
    assert "different (regression)" in slower.describe()


def test_what_a_comparison_cannot_judge() -> None:
    one = compare([100.0], [110.0], target=0.05, higher_is_better=True)
    assert one.verdict == "unknown" and one.ratio == pytest.approx(1.1) and one.high == math.inf
    assert math.isnan(compare([], [], target=0.05, higher_is_better=True).ratio)
    # no noise at all (a deterministic stand-in): the interval is the point
    exact = compare([1.0, 1.0, 1.0], [1.05, 1.05, 1.05], target=0.05, higher_is_better=True)
    assert exact.low == exact.high == exact.ratio == pytest.approx(1.05) and exact.verdict == "different"
    assert exact.p_value == 0.0 and exact.log_sd == 0.0
    for a, b in (([1.0, 2.0], [1.0]), ([1.0, 0.0], [1.0, 1.0]), ([1.0, math.nan], [1.0, 1.0])):
        with pytest.raises(ValueError):
            compare(a, b, target=0.05, higher_is_better=True)
    with pytest.raises(ValueError):
        compare([1.0, 2.0], [1.0, 2.0], target=5.0, higher_is_better=True)


# ---- the ladder ----------------------------------------------------------------------------------


def test_the_looks_and_the_alpha_each_spends() -> None:
    assert looks_of() == LADDER == (3, 5, 10)
    assert looks_of(cap=7) == (3, 5, 7)
    assert looks_of(cap=40) == (3, 5, 10, 20, 40)
    assert looks_of(cap=25) == (3, 5, 10, 20, 25)
    assert looks_of(cap=2) == (2,)
    alphas = look_alphas(looks_of(), 0.05)
    # alpha * (n / cap) ** 2, by look: 0.05 * (0.09, 0.25 - 0.09, 1 - 0.25)
    assert alphas == pytest.approx((0.0045, 0.008, 0.0375))
    assert sum(alphas) == pytest.approx(0.05)
    assert all(0 < x < 0.05 for x in alphas)
    assert sum(look_alphas(looks_of(cap=40), 0.05)) == pytest.approx(0.05)
    for bad in ((1, 5), ()):
        with pytest.raises(ValueError):
            looks_of(bad)
    with pytest.raises(ValueError):
        looks_of(cap=1)


def test_the_ladder_stops_at_the_first_look_on_a_clear_difference() -> None:
    rng = np.random.default_rng(2)
    a = 50 * _lognormal(rng, 0.01, 10)
    b = 1.25 * 50 * _lognormal(rng, 0.01, 10)
    r = sequential(list(a[:3]), list(b[:3]), target=0.05, higher_is_better=True)
    assert r.verdict == "different" and r.done and r.looks == 1 and r.comparison.n_pairs == 3
    assert r.comparison.alpha == pytest.approx(look_alphas(LADDER)[0]) and r.comparison.alpha < ALPHA
    # more pairs replay the same looks: the decision taken at 3 stands
    assert sequential(list(a), list(b), target=0.05, higher_is_better=True) == r
    assert "different (improvement)" in r.describe()


def test_the_ladder_asks_for_the_next_look_s_pairs_while_unknown() -> None:
    assert sequential([], [], target=0.05, higher_is_better=True).next_pairs == 3
    r = sequential([1.0, 1.0], [1.0, 1.1], target=0.05, higher_is_better=True)
    assert (r.verdict, r.comparison, r.looks, r.next_pairs) == ("unknown", None, 0, 3)
    ratios = [1.0, 1.04, 0.97, 1.02]  # noisy: not decided at 3
    r = sequential([1.0] * 4, ratios, target=0.05, higher_is_better=True)
    assert (r.verdict, r.looks, r.next_pairs, r.done) == ("unknown", 1, 5, False)
    assert r.comparison.n_pairs == 3 and "5 pairs wanted" in r.describe()


def test_a_step_too_small_for_the_budget_ends_inconclusive_with_the_interval_reached() -> None:
    # log ratios alternating +8 % and -4 %: a 2 % step in 6 % noise; every look's interval holds 1
    # and the equivalence interval reaches past 1.05, so neither "different" nor "same" can be said
    d = [0.08, -0.04] * 5
    r = sequential([1.0] * 10, [math.exp(x) for x in d], target=0.05, higher_is_better=True)
    assert r.verdict == "inconclusive" and r.done and r.looks == 3
    assert [c.n_pairs for c in r.history] == [3, 5, 10]
    assert [c.alpha for c in r.history] == pytest.approx(look_alphas(LADDER))
    assert r.comparison.n_pairs == 10
    assert r.comparison.low < 1 < 1.05 < r.comparison.high
    assert r.comparison.ratio == pytest.approx(math.exp(0.02))
    assert r.describe().startswith("inconclusive at budget after 3 look(s)")
    # the same data judged once at the full alpha would still not decide: the budget, not the split
    assert (
        compare([1.0] * 10, [math.exp(x) for x in d], target=0.05, higher_is_better=True).verdict == "unknown"
    )


def test_the_spent_alpha_is_what_keeps_a_look_from_deciding() -> None:
    # log ratios with mean 0.06 and t = 3.96 over 5 pairs: beyond t(0.975, 4) = 2.78, short of the
    # 4.85 the look at 5 pairs needs at its alpha of 0.008
    d = [0.10, 0.02, 0.08, 0.03, 0.07]
    b = [math.exp(x) for x in d]
    assert compare([1.0] * 5, b, target=0.05, higher_is_better=True).verdict == "different"
    r = sequential([1.0] * 5, b, target=0.05, higher_is_better=True)
    assert (r.verdict, r.looks, r.next_pairs) == ("unknown", 2, 10)
    assert r.comparison.n_pairs == 5 and r.comparison.low < 1 < r.comparison.ratio


def test_pairs_that_ran_out_take_the_next_look_in_its_place() -> None:
    d = [0.08, -0.04] * 5
    b = [math.exp(x) for x in d]
    r = sequential([1.0] * 7, b[:7], target=0.05, higher_is_better=True, exhausted=True)
    assert r.verdict == "inconclusive" and [c.n_pairs for c in r.history] == [3, 5, 7]
    assert r.comparison.alpha == pytest.approx(look_alphas(LADDER)[2])
    # exactly at a look: no second look on the same pairs
    r = sequential([1.0] * 5, b[:5], target=0.05, higher_is_better=True, exhausted=True)
    assert [c.n_pairs for c in r.history] == [3, 5] and r.verdict == "inconclusive"
    r = sequential([1.0], b[:1], target=0.05, higher_is_better=True, exhausted=True)
    assert r.verdict == "inconclusive" and r.comparison is None and r.done


# ---- power on synthetic noise (the target's acceptance test, before real A/A pairs existed) -----

# trials per cell: a share's standard error is then about 1.5 % at the step (true share ~88 % at
# 3 % CV) and 0.4 % on A/A data (true share ~3.7 % at 3 % CV), so either bound fails only on a real change
STEP_TRIALS, AA_TRIALS = 500, 2000


def _share_different(cv_: float, scale: float, seed: int, trials: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        a = 100 * _lognormal(rng, cv_, 10)
        b = scale * 100 * _lognormal(rng, cv_, 10)
        hits += sequential(list(a), list(b), target=0.05, higher_is_better=True).verdict == "different"
    return hits / trials


@pytest.mark.parametrize(("cv_", "kind"), [(0.02, "decode"), (0.03, "prefill")])
def test_the_ladder_sees_a_5_percent_step_and_rarely_a_step_that_is_not_there(cv_: float, kind: str) -> None:
    assert _share_different(cv_, 1.05, seed=33, trials=STEP_TRIALS) >= 0.80, kind
    assert _share_different(cv_, 1.00, seed=34, trials=AA_TRIALS) <= 0.05, kind


# ---- the detectable step -------------------------------------------------------------------------


def test_the_detectable_step_is_detected_with_its_power_by_brute_force() -> None:
    rng = np.random.default_rng(4)
    trials = 20_000
    for cv_, n in ((0.03, 5), (0.02, 10)):
        step = detectable_step(cv_, n)
        s = math.sqrt(math.log1p(cv_**2))
        d = math.log1p(step) + rng.normal(0, s, (trials, n)) - rng.normal(0, s, (trials, n))
        t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
        power = float(np.mean(np.abs(t) > stats.t.ppf(0.975, n - 1)))
        assert power == pytest.approx(0.80, abs=0.015), (cv_, n)


def test_the_detectable_step_against_the_textbook() -> None:
    # many pairs: the normal approximation (z(0.975) + z(0.8)) * sqrt(2) * cv / sqrt(n)
    n, cv_ = 2000, 0.03
    textbook = (1.959964 + 0.841621) * math.sqrt(2) * math.sqrt(math.log1p(cv_**2)) / math.sqrt(n)
    assert math.log1p(detectable_step(cv_, n)) == pytest.approx(textbook, rel=2e-3)
    # few pairs: the t distribution asks for more than the normal approximation
    few = (1.959964 + 0.841621) * math.sqrt(2) * math.sqrt(math.log1p(cv_**2)) / math.sqrt(3)
    assert math.log1p(detectable_step(cv_, 3)) > 1.5 * few
    steps = [detectable_step(cv_, k) for k in (3, 5, 10, 20)]
    assert steps == sorted(steps, reverse=True)
    # the goals: 3 % CV at 10 pairs sees a step below 5 %, 2 % CV one below 3 %
    assert detectable_step(0.03, 10) < 0.05 and detectable_step(0.02, 10) < 0.03
    assert detectable_step(0.03, 1) == math.inf and detectable_step(0.0, 5) == 0.0
    assert detectable_step(0.03, 10, alpha=0.01) > detectable_step(0.03, 10)


def test_the_coefficient_of_variation() -> None:
    assert cv([1.0, 2.0, 3.0]) == pytest.approx(0.5)  # sd 1 (n - 1), mean 2
    assert cv([10.0, 20.0, 30.0]) == pytest.approx(0.5)
    assert math.isnan(cv([5.0]))
    with pytest.raises(ValueError):
        cv([-1.0, 1.0])
