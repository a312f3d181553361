"""The evaluation set inside comparisons by pairs: every run answers it, and a release that scores lower
with confidence is *different (quality)* whatever its speed -- a stand-in that corrupts its output is
flagged even when faster (support/pair_standin.py ``corrupt``), in a comparison and in a bisection."""

from __future__ import annotations

from support.pair_standin import PairStandIn

from strix_pipeline.quality.items import ITEMS
from strix_pipeline.runner.pair_bisect import bisect_by_pairs
from strix_pipeline.runner.pair_model import THROUGHPUT_METRICS, ComparedRelease
from strix_pipeline.runner.pair_records import records
from strix_pipeline.runner.pairs import compare_releases
from strix_pipeline.warehouse import Warehouse

A, B = ComparedRelease("b11401", "11401.0.0"), ComparedRelease("b11434")


def run(standin: PairStandIn):
    lines: list[str] = []
    result = compare_releases(standin, A, B, metrics=THROUGHPUT_METRICS, progress=lines.append, seed=3)
    return result, lines


def test_a_faster_release_that_answers_wrongly_is_different_quality():
    result, lines = run(PairStandIn(factor=1.10, cv=0.02, seed=3, corrupt=frozenset({B.tag})))
    assert result.primary.verdict == "different" and result.primary.direction == "improvement"  # faster
    assert result.scores_lower == "B"
    assert result.headline().startswith(f"different (quality): {B.tag} (B) scores lower")
    assert len(result.quality_b.lost) == len(ITEMS) and result.quality_b.p_value < 0.05
    assert lines[-1].startswith("different (quality)")


def test_the_quality_verdict_is_stored_beside_each_metric(wh: Warehouse):
    result, _ = run(PairStandIn(factor=1.10, cv=0.02, seed=3, corrupt=frozenset({B.tag})))
    wh.save_comparison(*records(result))
    rows = wh.list_comparisons(comparison_id=result.comparison_id)
    assert {(r.scores_lower, r.quality_p) for r in rows} == {("B", result.quality_b.p_value)}
    alike, _ = run(PairStandIn(factor=1.10, cv=0.02, seed=3, answers=False))
    wh.save_comparison(*records(alike))
    assert {
        (r.scores_lower, r.quality_p) for r in wh.list_comparisons(comparison_id=alike.comparison_id)
    } == {(None, None)}


def test_the_baseline_answering_wrongly_is_flagged_too_and_equal_answers_are_not():
    worse_a, _ = run(PairStandIn(factor=1.0, cv=0.02, seed=3, corrupt=frozenset({A.tag})))
    assert worse_a.scores_lower == "A" and worse_a.headline().startswith("different (quality): b11401 (A)")
    alike, _ = run(PairStandIn(factor=1.10, cv=0.02, seed=3))
    assert alike.scores_lower is None and alike.headline().startswith("decode_tokens_per_s +")
    assert alike.quality_b is not None and not alike.quality_b.lost
    unasked, _ = run(PairStandIn(factor=1.10, cv=0.02, seed=3, answers=False))
    assert (unasked.quality_a, unasked.quality_b, unasked.scores_lower) == (None, None, None)


def test_a_bisection_s_comparisons_carry_the_evaluation_set():
    tags = [f"b{n}" for n in range(100, 105)]
    rel = [ComparedRelease(t, f"{t[1:]}.0.0") for t in tags]
    # b103 on: 5 % slower and answering wrongly
    engine = PairStandIn(
        cv=0.014, seed=1, factors={"b103": 0.95, "b104": 0.95}, corrupt=frozenset({"b103", "b104"})
    )
    found = bisect_by_pairs(
        engine, rel[0], rel[-1], rel[1:-1], metric="prefill_tokens_per_s", progress=lambda _: None
    )
    assert found.named[0] == ("b103", "b102")
    verify = next(c for c in found.comparisons if (c.release_a.tag, c.release_b.tag) == ("b102", "b103"))
    assert verify.scores_lower == "B"
    assert "on the evaluation set it scores lower" in found.record.reason
    assert "different (quality)" in found.record.reason
