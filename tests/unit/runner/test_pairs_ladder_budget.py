"""The ladder follows the noise as far as the configured budget allows: past 10 pairs it doubles on
(Pinpoint climbs 10 -> 160), the significance level spent across every look so a *different* stays
wrong with probability <= alpha, and a step the 10-pair cap leaves inconclusive at a 2-core guest's
noise (decode CV ~6 %) is decided once the budget allows more pairs."""

from __future__ import annotations

import math
import random

import pytest
from support.pair_standin import PairStandIn

from strix_pipeline.runner.pair_model import ComparedRelease, descriptive_only
from strix_pipeline.runner.pairs import compare_releases
from strix_pipeline.stats import paired

A, B = ComparedRelease("b11401", "11401.0.0"), ComparedRelease("b11434")


def test_a_budget_of_160_pairs_climbs_10_20_40_80_160_spending_alpha_once():
    looks = paired.looks_of(paired.LADDER, 160)
    assert looks == (3, 5, 10, 20, 40, 80, 160)
    alphas = paired.look_alphas(looks)
    assert all(a > 0 for a in alphas) and sum(alphas) == pytest.approx(paired.ALPHA)


def test_a_and_a_are_seldom_called_different_over_all_seven_looks():
    rng = random.Random(5)
    sigma = math.sqrt(math.log1p(0.03**2))
    wrong = 0
    for _ in range(400):
        a = [math.exp(rng.gauss(0, sigma)) for _ in range(160)]
        b = [math.exp(rng.gauss(0, sigma)) for _ in range(160)]
        r = paired.sequential(a, b, target=0.05, higher_is_better=True, cap=160)
        wrong += r.verdict == "different"
    assert wrong <= 0.05 * 400, wrong  # alpha over all looks (the union bound: in fact well under)


def run(cap: int, seed: int):
    # a 2-core AVX2 guest's decode noise, a 5 % step
    engine = PairStandIn(factor=0.95, cv=0.065, seed=seed)
    return compare_releases(
        engine, A, B, metrics=["decode_tokens_per_s"], cap=cap, seed=seed, progress=lambda _: None
    )


def test_the_10_pair_cap_leaves_that_step_mostly_inconclusive():
    assert sum(run(10, seed).metrics[0].verdict == "inconclusive" for seed in range(8)) >= 5


@pytest.mark.parametrize("seed", range(8))
def test_a_step_the_10_pair_cap_cannot_resolve_is_decided_within_a_160_pair_budget(seed):
    big = run(160, seed)
    (m,) = big.metrics
    assert m.verdict == "different" and m.direction == "regression", m.ladder.describe()
    assert m.pairs in (10, 20, 40, 80, 160) and m.low <= 0.95 <= m.high  # the interval covers the truth
    assert len(big.runs) == 2 * m.pairs  # no pair beyond the look that decided


def test_ttft_at_several_clients_is_descriptive_only_on_two_cores_and_the_rule_is_one():
    assert "2-core host" in descriptive_only("ttft_p50_ms", 5, 2)
    assert descriptive_only("ttft_p95_ms", 5, 1) is not None
    assert descriptive_only("ttft_p50_ms", 1, 2) is None  # one client: nothing queues beside it
    assert descriptive_only("ttft_p50_ms", 5, 8) is None
    assert descriptive_only("decode_tokens_per_s", 1, 2) is None
    # in a comparison: reported with its interval, never the verdict, and no pair run for it
    engine = PairStandIn(factor=0.95, cv=0.02, seed=3)
    why = {"ttft_p50_ms": descriptive_only("ttft_p50_ms", 5, 2)}
    result = compare_releases(
        engine,
        A,
        B,
        metrics=["ttft_p50_ms", "decode_tokens_per_s"],
        descriptive=why,
        seed=3,
        progress=lambda _: None,
    )
    ttft = next(m for m in result.metrics if m.metric == "ttft_p50_ms")
    assert result.primary.metric == "decode_tokens_per_s"
    assert ttft.verdict == "inconclusive" and ttft.why == why["ttft_p50_ms"] and ttft.ratio is not None
    with pytest.raises(ValueError, match="descriptive only"):
        compare_releases(engine, A, B, metrics=["ttft_p50_ms"], descriptive=why, progress=lambda _: None)
