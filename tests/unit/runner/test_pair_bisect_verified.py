"""A bisection by pairs that verifies what it names, over a simulated family of releases
(support/pair_standin.py: each release its own true speed, each run's figure drawn at a known noise):

- the release it names is compared with its predecessor directly by pairs, and named only when the two
  are *different* in the range's direction;
- a gradual drift (1 % a release) is a drift over the range, not one release;
- two steps in the range are both found;
- the cost is printed per step and bounded by a budget of pairs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.pair_standin import PairStandIn

from strix_pipeline.analysis.bisect.steps import BY_PAIRS
from strix_pipeline.runner.pair_bisect import bisect_by_pairs, pairs_bound, week_lines
from strix_pipeline.runner.pair_model import ComparedRelease

TAGS = [f"b{n}" for n in range(100, 111)]  # b100 (without the change) ... b110 (with it)
CV = 0.014  # prefill tok/s, one run, benchmarks/data/precision_aa_avx512.json
METRIC = "prefill_tokens_per_s"


def releases(tags):
    return [ComparedRelease(t, f"{t[1:]}.0.0") for t in tags]


def family(speed, seed: int, cv: float = CV) -> PairStandIn:
    """Releases whose speed against b100 is ``speed(k)`` for b(100 + k)."""
    return PairStandIn(cv=cv, seed=seed, factors={t: speed(k) for k, t in enumerate(TAGS)})


def bisect(run_one, lines=None, **kw):
    before, *between, after = releases(TAGS)
    say = (lambda _: None) if lines is None else lines.append
    return bisect_by_pairs(run_one, before, after, between, metric=METRIC, progress=say, **kw)


def comparisons_of(found) -> list[tuple[str, str, str, float | None]]:
    return [
        (c.release_a.tag, c.release_b.tag, c.metrics[0].verdict, c.metrics[0].ratio)
        for c in found.comparisons
    ]


@pytest.mark.parametrize("seed", range(6))
def test_the_named_release_is_compared_with_its_predecessor_directly(seed):
    found = bisect(family(lambda k: 0.95 if k >= 6 else 1.0, seed), seed=seed)
    r = found.record
    assert (r.status, r.first_release, r.last_without) == ("found", "b106", "b105"), r.reason
    # the two were compared with each other, not only each with the brackets: different, and slower
    # as the range is (b110 against b100)
    direct = [c for c in comparisons_of(found) if c[:2] == ("b105", "b106")]
    assert direct and direct[0][2] == "different" and direct[0][3] < 1, comparisons_of(found)
    brackets = [c for c in comparisons_of(found) if c[:2] == ("b100", "b110")]
    assert brackets and brackets[0][2] == "different" and brackets[0][3] < 1
    assert "b106 differs from b105 (vs b105: different" in r.reason
    assert found.named == [("b106", "b105")]


@pytest.mark.parametrize("seed", range(6))
def test_a_gradual_drift_is_a_drift_over_the_range_not_a_release(seed):
    # 1 % a release, 10 % over the range: every step is below the target, all the same sign
    found = bisect(family(lambda k: 0.99**k, seed), seed=seed)
    r = found.record
    assert (r.status, r.first_release, found.named) == ("drift", None, []), r.reason
    assert f"a drift over the range {TAGS[0]}..{TAGS[-1]}" in r.reason
    assert "not named" in r.reason  # the release the search narrowed to, compared with its predecessor


@pytest.mark.parametrize("seed", range(6))
def test_two_steps_in_the_range_are_both_found(seed):
    # b103 5 % slower, b108 another 5 %: the second step is looked for once the first is named
    found = bisect(family(lambda k: 0.95 ** ((k >= 3) + (k >= 8)), seed), seed=seed)
    r = found.record
    assert found.named == [("b103", "b102"), ("b108", "b107")], r.reason
    assert (r.status, r.first_release, r.last_without) == ("found", "b103", "b102")
    assert "a second step: b108 differs from b107" in r.reason


def test_one_step_leaves_no_second_one_said_so():
    found = bisect(family(lambda k: 0.95 if k >= 4 else 1.0, 2), seed=2)
    assert found.named == [("b104", "b103")]
    assert "no second step: b110 vs b104: same" in found.record.reason


def test_each_step_prints_its_cost_and_the_budget_of_pairs_bounds_the_whole():
    lines: list[str] = []
    found = bisect(family(lambda k: 0.95 if k >= 6 else 1.0, 1), lines, seed=1, max_pairs=200)
    costs = [line for line in lines if "cost " in line and "engine starts), at most 32;" in line]
    assert len(costs) == len(found.steps) and all("of at most 200" in c for c in costs), lines
    assert found.pairs_spent <= pairs_bound(len(TAGS) - 2, cap=10, max_pairs=200)
    # a budget too small for the search: it stops before passing it, saying so
    small = bisect(family(lambda k: 0.95 if k >= 6 else 1.0, 1), seed=1, max_pairs=60)
    assert small.record.status == "exhausted" and "budget of 60 pairs" in small.record.reason
    assert small.pairs_spent <= 60


def test_the_week_plan_counts_a_waiting_bisection_by_pairs():
    found = bisect(family(lambda k: 0.95 if k >= 6 else 1.0, 1), seed=1)
    waiting = replace(found.record, status="running", next_key=BY_PAIRS + "llamacpp:b105")
    lines = week_lines([waiting, found.record], cap=10, max_pairs=200)
    most = pairs_bound(len(TAGS) - 2, cap=10, max_pairs=200)
    assert f"bisections by pairs on local: 1, at most {most} pairs ({2 * most} engine starts" in lines[1]
    assert "b100..b110, 9 releases between" in lines[2] and "a step at most 32" in lines[2]
    assert week_lines([found.record], cap=10, max_pairs=200) == []  # a finished one costs nothing more
