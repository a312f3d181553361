"""C3 by interleaved pairs: when the decision's pair was compared by balanced AB/BA
pairs of fresh runs of the very releases and models C3 judges, the paired ratio's interval decides and
the two single runs are shown beside it; pairs of other releases are not taken, saying so; without
any, C3 says it stands on two single runs."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from support.decision_seed import SEPT, evidence_of, make_config, run_record, run_result

from strix_pipeline.analysis.decision.evidence import PairedTtft
from strix_pipeline.analysis.decision.verdict import judge

NOW = SEPT + timedelta(days=1)
CONFIG = make_config(baseline_model="qwen3-30b-a3b-q4")
# single runs: the candidate at 1000 ms against llama-server's 1800 ms -- faster with confidence
RUNS = [
    run_result(run_record("cand", "vllm", digest="sha256:" + "a" * 64), ttft5=(1000.0, 950.0, 1050.0)),
    run_result(
        run_record(
            "llama-q4",
            "llamacpp",
            started_at=SEPT - timedelta(minutes=30),
            tag="server-rocm-b6500",
            profile="qwen3-30b-a3b-q4",
            quant="Q4_K_M",
            family="qwen3-30b-a3b",
        ),
        ttft5=(1800.0, 1710.0, 1890.0),
    ),
]
BASE, CAND = "llamacpp server-rocm-b6500 qwen3-30b-a3b-q4", "vllm v0.11.0 qwen3-30b-a3b"


def pairs(low: float, high: float, *, a: str = BASE, b: str = CAND) -> PairedTtft:
    return PairedTtft("cmp-0123456789ab", a, b, 5, (low + high) / 2, low, high, "different", 0.01, SEPT)


def c3(paired: dict[str, PairedTtft]):
    ev = replace(evidence_of(RUNS, CONFIG, NOW), paired_ttft=paired)
    return {c.criterion: c for c in judge(ev, CONFIG).criteria}["C3"]


def test_the_interleaved_pairs_decide_and_the_single_runs_stand_beside_them() -> None:
    # by pairs the candidate is 2-10 % slower: the single runs' pass is not the verdict
    got = c3({"production": pairs(1.02, 1.10)})
    assert got.status == "fail", got.reason
    assert got.reason.startswith("by 5 interleaved pairs of fresh runs (cmp-0123456789ab): ratio 1.06x")
    assert "beside them, the single runs: TTFT p95 at 5 clients 1000 ms" in got.reason
    assert (got.ci_low, got.ci_high, got.value) == (1.02, 1.10, 1.06)
    assert c3({"production": pairs(0.50, 0.60)}).status == "pass"
    straddles = c3({"production": pairs(0.95, 1.04)})
    assert straddles.status == "unknown" and "it contains 1.00x" in straddles.reason


def test_pairs_of_other_releases_are_not_taken_and_the_reason_says_so() -> None:
    got = c3({"production": pairs(1.02, 1.10, b="vllm v0.10.2 qwen3-30b-a3b")})
    assert got.status == "pass"  # the single runs', faster with confidence
    assert "not by its interleaved pairs (cmp-0123456789ab: vllm v0.10.2 qwen3-30b-a3b against" in got.reason
    # the equal-weights match-up's comparison never stands in for the production match-up's
    assert "two single runs" in c3({"equal_weights": pairs(1.02, 1.10)}).reason


def test_without_pairs_c3_says_it_stands_on_two_single_runs() -> None:
    got = c3({})
    assert got.status == "pass"
    assert (
        "two single runs: no fresh comparison of the production match-up by interleaved pairs on strix-halo"
        in got.reason
    )
