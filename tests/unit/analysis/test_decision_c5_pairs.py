"""C5 on a Box's interleaved pairs: every pair run reads the memory its engine holds after load, and C5
decides on the paired ratio's interval against 1 + the tolerance, the two single runs shown beside it;
without that comparison C5 stays on the single runs."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from support.decision_seed import SEPT, c3_pairs_record, evidence_of, make_config, switch_runs

from strix_pipeline.analysis.decision.evidence import PairedTtft
from strix_pipeline.analysis.decision.verdict import judge

NOW = SEPT + timedelta(days=1)


def c5_with_pairs(ratios: tuple[float, ...], **decision: object):
    """C5 judged on the seed's runs with a Box's pairs of the same releases whose held-memory ratios
    (candidate over baseline, pair by pair) are ``ratios``; and the comparison it read."""
    runs, config = switch_runs(), make_config(**decision)
    record = replace(
        c3_pairs_record(runs, config, NOW, ratios=ratios), metric="held_bytes", higher_is_better=False
    )
    pairs = PairedTtft(**{k: v for k, v in vars(record).items() if k in PairedTtft.__dataclass_fields__})
    ev = replace(evidence_of(runs, config, NOW), paired_memory={"production": pairs})
    return {c.criterion: c for c in judge(ev, config).criteria}["C5"], record


def test_without_pairs_c5_compares_the_two_single_runs_held_figures() -> None:
    runs, config = switch_runs(), make_config()
    c5 = {c.criterion: c for c in judge(evidence_of(runs, config, NOW), config).criteria}["C5"]
    assert c5.unit == "bytes" and c5.reason.startswith("held after load"), c5.reason


def test_pairs_holding_less_pass_with_the_interval_wholly_below_the_limit() -> None:
    c5, record = c5_with_pairs((0.80, 0.81, 0.79, 0.80, 0.82))
    assert c5.status == "pass", c5.reason
    assert c5.reason.startswith(f"by 5 interleaved pairs of fresh runs ({record.comparison_id}): held memory")
    assert "of each run's memory held after load), wholly at or below 1.00x" in c5.reason
    assert "beside them, the single runs: held after load" in c5.reason  # the single runs still shown
    assert (c5.unit, c5.value, c5.ci_low, c5.ci_high, c5.threshold) == (
        "ratio",
        record.ratio,
        record.low,
        record.high,
        1.0,
    )


def test_pairs_holding_more_than_the_tolerance_fail() -> None:
    c5, _ = c5_with_pairs((1.30, 1.32, 1.29, 1.31, 1.30), memory_tolerance_pct=10)
    assert c5.status == "fail" and "wholly above 1.10x: holds more than llamacpp" in c5.reason, c5.reason
    assert c5.threshold == pytest.approx(1.10)


def test_pairs_whose_interval_straddles_the_limit_leave_c5_inconclusive() -> None:
    c5, record = c5_with_pairs((0.90, 1.20, 0.95, 1.15, 1.00), memory_tolerance_pct=5)
    assert record.low < 1.05 < record.high
    assert c5.status == "unknown" and c5.reason.startswith("inconclusive by 5 interleaved pairs"), c5.reason


def test_pairs_of_other_releases_than_the_runs_do_not_decide_and_say_so() -> None:
    runs, config = switch_runs(), make_config()
    record = replace(c3_pairs_record(runs, config, NOW, ratios=(0.8,) * 5), release_b="vllm v0.0.1 other")
    pairs = PairedTtft(**{k: v for k, v in vars(record).items() if k in PairedTtft.__dataclass_fields__})
    ev = replace(evidence_of(runs, config, NOW), paired_memory={"production": pairs})
    c5 = {c.criterion: c for c in judge(ev, config).criteria}["C5"]
    assert c5.unit == "bytes" and "not by its interleaved pairs" in c5.reason, c5.reason
