"""A bisection the way Pinpoint does it -- each midpoint compared by pairs with both
brackets, pairs added only on *unknown* -- over a stand-in engine whose step is known (5 % at a known
release) and whose noise is the CV measured on this project's machines (benchmarks/data)."""

from __future__ import annotations

import pytest
from support.pair_standin import PairStandIn

from strix_pipeline.analysis.bisect.search import runs_bound
from strix_pipeline.runner.pair_bisect import STEP_KEY_PREFIX, bisect_by_pairs
from strix_pipeline.runner.pair_model import ComparedRelease

TAGS = [f"b{n}" for n in range(100, 111)]  # b100 (without the change) ... b110 (with it)
PREFILL_CV = 0.014  # prefill tok/s, one run, benchmarks/data/precision_aa_avx512.json


def releases(tags):
    return [ComparedRelease(t, f"{t[1:]}.0.0") for t in tags]


def engine(first_slow: str | None, seed: int, cv: float = PREFILL_CV, factor: float = 0.95) -> PairStandIn:
    slow = frozenset(TAGS[TAGS.index(first_slow) :]) if first_slow else frozenset()
    return PairStandIn(cv=cv, factor=factor, seed=seed, changed=slow)


def bisect(run_one, **kw):
    before, *between, after = releases(TAGS)
    return bisect_by_pairs(
        run_one, before, after, between, metric="prefill_tokens_per_s", progress=lambda _: None, **kw
    )


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("first_slow", ["b101", "b106", "b110"])
def test_a_5_percent_step_at_a_known_release_is_named(first_slow, seed):
    found = bisect(engine(first_slow, seed), seed=seed)
    r = found.record
    assert (r.status, r.first_release) == ("found", first_slow), (r.reason, [s.note for s in found.steps])
    assert r.last_without == TAGS[TAGS.index(first_slow) - 1]
    assert len(found.steps) <= runs_bound(len(TAGS) - 2)
    # every step ran two comparisons, stored by id on the step, each starting its own engines
    for step in found.steps:
        ids = step.partition_key.removeprefix(STEP_KEY_PREFIX).split(",")
        assert len(ids) == 2 and step.partition_key.startswith(STEP_KEY_PREFIX)
    assert r.runs_used == found.engine_starts == sum(len(c.runs) for c in found.comparisons)


def test_pairs_are_added_only_while_a_verdict_is_unknown():
    run_one = engine("b106", seed=3)
    found = bisect(run_one, seed=3, cap=10)
    assert len(run_one.calls) == found.engine_starts
    for c in found.comparisons:
        (m,) = c.metrics
        assert len(c.runs) == 2 * m.pairs  # no pair run beyond the look that decided
        if m.pairs < 10:
            assert m.verdict in ("different", "same"), m  # it stopped early only once decided
    # the first look is at 3 pairs: a comparison decided there cost 6 starts, and some did
    assert min(len(c.runs) for c in found.comparisons) == 6
    noisy = engine("b106", seed=3, cv=0.03)  # decode's noise on a shared guest: more pairs needed
    again = bisect(noisy, seed=3, cap=10)
    assert again.engine_starts > found.engine_starts


def test_no_step_between_the_brackets_is_inconclusive_not_a_release():
    # the brackets are compared by pairs first: within the target, there is nothing to bisect
    found = bisect(engine(None, seed=1), seed=1)
    assert found.record.status == "inconclusive" and found.record.first_release is None
    assert "the brackets compared by pairs" in found.record.reason and "same" in found.record.reason
    assert found.steps == [] and found.named == []


def test_the_budget_of_steps_stops_it_exhausted():
    found = bisect(engine("b103", seed=2), seed=2, max_steps=1)
    assert (found.record.status, len(found.steps)) == ("exhausted", 1)
    assert "1 steps spent" in found.record.reason


def test_a_midpoint_that_never_runs_is_skipped_and_the_search_goes_on():
    run_one = engine("b108", seed=4)
    run_one.broken = frozenset({"b105"})
    found = bisect(run_one, seed=4)
    assert found.steps[0].version == "b105" and found.steps[0].side == "skipped"
    assert (found.record.status, found.record.first_release) == ("found", "b108"), found.record.reason


def test_a_skipped_release_beside_the_step_leaves_it_unnamed():
    # b105 cannot be run and b106 made the change: either could be the first, as git bisect skip says
    run_one = engine("b106", seed=4)
    run_one.broken = frozenset({"b105"})
    found = bisect(run_one, seed=4)
    assert (found.record.status, found.record.first_release) == ("inconclusive", None)
    assert [s.version for s in found.steps if s.side == "after"][-1] == "b106"
