"""The pair runner over a stand-in engine (support/pair_standin.py): balanced AB/BA pairs, a verdict
per metric from stats/paired.py, pairs added only while a metric is unknown, a failed run's pair
dropped and the plan rebalanced, and the result stored as the warehouse's rows."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.pair_standin import PairStandIn

from strix_pipeline.hosts.probes.host_noise import HostNoise
from strix_pipeline.runner.pair_model import THROUGHPUT_METRICS, ComparedRelease
from strix_pipeline.runner.pair_records import records
from strix_pipeline.runner.pairs import compare_releases
from strix_pipeline.stats import paired
from strix_pipeline.warehouse import Warehouse

A, B = ComparedRelease("b11401", "11401.0.0"), ComparedRelease("b11434")


def run(standin: PairStandIn, **kw):
    lines: list[str] = []
    kw.setdefault("metrics", THROUGHPUT_METRICS)  # the stand-in gives throughput figures only
    result = compare_releases(standin, A, B, progress=lines.append, **kw)
    return result, lines


def by_metric(result):
    return {m.metric: m for m in result.metrics}


def test_a_5_pct_slower_b_at_2_pct_noise_is_different_a_regression() -> None:
    standin = PairStandIn(factor=0.95, cv=0.02, seed=3)
    result, lines = run(standin, seed=11)
    for m in result.metrics:
        assert m.verdict == "different", (m.metric, m.ladder.describe())
        assert m.ladder.comparison.direction == "regression"
        assert m.low < m.ratio < m.high < 1.0
        assert 0.90 < m.ratio < 1.0
    # a fresh engine start per run, two per pair, every one warmed up and its warm-up recorded
    kept = max(m.pairs for m in result.metrics)
    assert len(standin.calls) == len(result.runs) == 2 * kept
    assert all(r.figures.warmup_ms == 900.0 for r in result.runs)
    assert any("warm-up 900 ms discarded" in line for line in lines)
    assert any(line.startswith("look 1 at 3 pairs") for line in lines)


def test_the_ladder_adds_pairs_only_while_a_metric_is_unknown() -> None:
    for seed in range(8):
        standin = PairStandIn(factor=0.97, cv=0.02, seed=seed)
        result, _ = run(standin, seed=seed, metrics=["decode_tokens_per_s"])
        (m,) = result.metrics
        plan = paired.looks_of(paired.LADDER, 10)
        assert m.pairs in plan and len(result.runs) == 2 * m.pairs
        # every look before the last was unknown: no pair was run after a verdict
        assert [c.verdict for c in m.ladder.history[:-1]] == ["unknown"] * (m.looks - 1)
        assert m.pairs == plan[m.looks - 1]
        if m.verdict == "inconclusive":
            assert m.pairs == 10


def test_a_clear_step_stops_at_the_first_look_and_a_small_noise_says_same() -> None:
    big, _ = run(PairStandIn(factor=0.80, cv=0.01, seed=1), seed=1)
    assert {m.verdict for m in big.metrics} == {"different"} and len(big.runs) == 6
    same, _ = run(PairStandIn(factor=1.0, cv=0.001, seed=1), seed=1)
    assert {m.verdict for m in same.metrics} == {"same"} and len(same.runs) == 6
    for m in same.metrics:
        assert 0.95 <= m.low <= 1.0 <= m.high <= 1.05


def test_orders_are_balanced_and_follow_the_seeded_plan() -> None:
    standin = PairStandIn(factor=0.97, cv=0.03, seed=5)
    result, _ = run(standin, seed=42, pairs=4, cap=4)
    assert list(result.orders) == ["".join(o) for o in paired.pair_order(4, 42)]
    assert result.orders.count("AB") == result.orders.count("BA") == 2
    # the runs went in each pair's order
    sides = [r.side for r in result.runs]
    assert sides == [s for o in result.orders for s in o]


def test_a_failed_run_drops_its_pair_and_the_order_is_rebalanced() -> None:
    # run 2 is the second half of pair 1: pair 1 goes, its first run's figures with it
    standin = PairStandIn(factor=0.95, cv=0.02, seed=3, fail_runs={2})
    result, lines = run(standin, seed=7, pairs=4, cap=4)
    assert result.dropped_pairs == 1
    first, failed = result.runs[0], result.runs[1]
    assert failed.figures is None and "exited with code -9" in failed.error and not failed.kept
    assert first.figures is not None and not first.kept and first.pair == failed.pair == 1
    assert all(r.kept for r in result.runs[2:])
    assert any("failed, pair dropped" in line for line in lines)
    # still 4 kept pairs, AB and BA even again
    assert len(result.orders) == 4 and result.orders.count("AB") == 2
    for m in result.metrics:
        assert m.pairs == 4 and len(m.values) == 4
    rows, runs = records(result)
    assert [r.kept for r in runs] == [False, False, *[True] * 8]
    assert rows[0].dropped_pairs == 1 and rows[0].orders == list(result.orders)


def test_runs_failing_beyond_the_budget_end_the_ladder_on_what_there_is() -> None:
    standin = PairStandIn(factor=0.95, cv=0.02, seed=3, fail_runs={1, 3, 5, 7, 9, 11})
    result, lines = run(standin, seed=7, max_dropped=2)
    assert result.dropped_pairs == 3
    assert any("pairs dropped for failed or excluded runs (at most 2)" in line for line in lines)
    for m in result.metrics:
        assert m.verdict in ("different", "same", "inconclusive")


def test_an_unknown_metric_and_a_single_pair_are_refused_before_any_run() -> None:
    standin = PairStandIn()
    with pytest.raises(ValueError, match="no such metric to compare: ttft"):
        compare_releases(standin, A, B, metrics=["ttft"], progress=lambda _: None)
    with pytest.raises(ValueError, match="--pairs must be at least 2"):
        compare_releases(standin, A, B, pairs=1, progress=lambda _: None)
    assert standin.calls == []


def test_the_result_round_trips_through_the_warehouse(wh: Warehouse) -> None:
    result, _ = run(PairStandIn(factor=0.95, cv=0.02, seed=3, fail_runs={4}), seed=11)
    rows, runs = records(result)
    wh.save_comparison(rows, runs)
    stored = wh.list_comparisons(comparison_id=result.comparison_id)
    assert {r.metric: r for r in stored} == {r.metric: r for r in rows}
    assert wh.comparison_runs(result.comparison_id) == runs
    for r, m in zip(
        sorted(rows, key=lambda r: r.metric), sorted(result.metrics, key=lambda m: m.metric), strict=True
    ):
        assert (r.ratio, r.low, r.high, r.verdict, r.looks, r.pairs) == (
            m.ratio,
            m.low,
            m.high,
            m.verdict,
            m.looks,
            m.pairs,
        )
        assert r.values_b == [v.b for v in m.values]


def test_a_pass_on_a_busy_host_is_marked_kept_out_and_its_pair_run_again() -> None:
    inner = PairStandIn(factor=0.95, cv=0.02, seed=3)

    def busy_second_run(release, label):
        figs = inner(release, label)
        busy = (
            "40.0 % CPU used outside the engine and client (threshold 15 %)"
            if len(inner.calls) == 2
            else None
        )
        return replace(figs, host_noise=HostNoise(0.0, 40.0 if busy else 1.0, 50.0, None, busy=busy))

    result, lines = run(busy_second_run, seed=11, metrics=["decode_tokens_per_s"])
    bad = result.runs[1]
    assert not bad.kept and bad.error.startswith("busy host: 40.0 % CPU used outside")
    assert not result.runs[0].kept  # its partner goes with it: never averaged in
    assert result.dropped_pairs == 1
    (m,) = result.metrics
    assert m.pairs == len([r for r in result.runs if r.kept]) // 2  # the kept pairs, re-run in its place
    assert any("busy host" in line for line in lines)
