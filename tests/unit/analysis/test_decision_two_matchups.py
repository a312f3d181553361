"""C3 and C5 on two match-ups: the production match-up (llama-server's Q4_K_M against the
candidate) and the equal-weights match-up (llama-server serving the candidate's own BF16 weights). One
setting, decision.decided_by, says which decides; both are stored and shown."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from rich.console import Console
from support.decision_seed import SEPT, judge_runs, make_config, run_record, run_result, seeded

from strix_pipeline.analysis.decision import evaluate
from strix_pipeline.cli.decide import print_decision

NOW = SEPT + timedelta(days=1)


def candidate():
    """vLLM on BF16: faster than llama-server on Q4_K_M, slower than llama-server on the same BF16."""
    return run_result(
        run_record("cand", "vllm", held_gib=15.0, digest="sha256:" + "a" * 64), ttft5=(1000.0, 950.0, 1050.0)
    )


def llama(run_id: str, quant: str, p95: float, held: float, minutes: int):
    profile = "qwen3-30b-a3b-q4" if quant == "Q4_K_M" else "qwen3-30b-a3b"
    return run_result(
        run_record(
            run_id,
            "llamacpp",
            started_at=SEPT - timedelta(minutes=minutes),
            tag="server-rocm-b6500",
            profile=profile,
            quant=quant,
            family="qwen3-30b-a3b",
            held_gib=held,
        ),
        ttft5=(p95, p95 * 0.95, p95 * 1.05),
    )


# production: llama-server Q4_K_M slower (1800 ms) and holding more (19 GiB); equal weights: llama-server
# on BF16 faster (600 ms) and holding less (12 GiB) -- the two match-ups disagree on both criteria
RUNS = [
    candidate(),
    llama("llama-q4", "Q4_K_M", 1800.0, 19.0, 30),
    llama("llama-bf16", "BF16", 600.0, 12.0, 10),
]


def judged(runs, **decision):
    config = make_config(baseline_model="qwen3-30b-a3b-q4", **decision)
    return judge_runs(runs, config, NOW)


@pytest.mark.parametrize("criterion", ["C3", "C5"])
def test_the_production_matchup_decides_by_default_and_the_equal_weights_matchup_is_beside_it(criterion):
    c = {r.criterion: r for r in judged(RUNS).criteria}[criterion]
    assert (c.matchup, c.status, c.evidence_run_ids) == ("production", "pass", ["cand", "llama-q4"]), c.reason
    assert (c.other_matchup, c.other_status, c.other_run_ids) == (
        "equal_weights",
        "fail",
        ["cand", "llama-bf16"],
    )
    assert "beside it, the equal-weights match-up: fail" in c.reason, c.reason
    assert c.other_value is not None and c.other_reason and "llama-q4" not in c.other_reason


@pytest.mark.parametrize("criterion", ["C3", "C5"])
def test_decided_by_equal_weights_makes_that_matchup_the_verdicts(criterion):
    d = judged(RUNS, decided_by="equal_weights")
    c = {r.criterion: r for r in d.criteria}[criterion]
    assert (c.matchup, c.status, c.evidence_run_ids) == ("equal_weights", "fail", ["cand", "llama-bf16"]), (
        c.reason
    )
    assert (c.other_matchup, c.other_status) == ("production", "pass")
    assert d.verdict != "switch"


def test_c3s_other_matchup_keeps_its_own_interval():
    c3 = {r.criterion: r for r in judged(RUNS).criteria}["C3"]
    assert c3.ci_high is not None and c3.ci_high < 1.0  # production: faster with confidence
    assert c3.other_ci_low is not None and c3.other_ci_low > 1.0  # equal weights: slower with confidence
    assert c3.other_value == pytest.approx(1000.0 / 600.0, rel=0.1)


@pytest.mark.parametrize("criterion", ["C3", "C5"])
def test_without_a_baseline_run_at_the_candidates_weights_the_other_matchup_is_unknown_saying_why(criterion):
    c = {r.criterion: r for r in judged(RUNS[:2]).criteria}[criterion]
    assert (c.status, c.other_status, c.other_run_ids) == ("pass", "unknown", [])
    assert "at the candidate's BF16 weights" in (c.other_reason or ""), c.other_reason
    assert "beside it, the equal-weights match-up: unknown" in c.reason


def test_the_production_side_never_takes_the_equal_weights_run():
    # only the BF16 llama-server run is fresh: production's Q4_K_M side has nothing, whatever is newer
    c3 = {r.criterion: r for r in judged([RUNS[0], RUNS[2]]).criteria}["C3"]
    assert c3.status == "unknown" and "llama-bf16" not in c3.evidence_run_ids, c3.reason
    assert c3.other_status == "fail"


def test_both_matchups_are_stored_and_read_back_one_row_per_matchup(tmp_path: Path):
    wh = seeded(tmp_path / "w.duckdb", RUNS)
    config = make_config(baseline_model="qwen3-30b-a3b-q4")
    d = evaluate(wh, config, now=NOW)
    wh.save_decision(d.criteria)
    rows = wh.query_df(
        "SELECT criterion, matchup, decides, status, run_ids FROM v_decision_matchups "
        "ORDER BY criterion, matchup"
    ).rows()
    assert rows == [
        ("C3", "equal_weights", False, "fail", ["cand", "llama-bf16"]),
        ("C3", "production", True, "pass", ["cand", "llama-q4"]),
        ("C5", "equal_weights", False, "fail", ["cand", "llama-bf16"]),
        ("C5", "production", True, "pass", ["cand", "llama-q4"]),
    ]


def test_strix_decide_prints_both_matchups_under_the_criteria():
    console = Console(record=True, width=200)
    print_decision(judged(RUNS), console)
    text = console.export_text()
    both = text.split("C3 and C5 on both match-ups")[1]
    rows = [line.split("│")[1:5] for line in both.splitlines() if line.startswith("│ C")]
    assert [[cell.strip() for cell in r] for r in rows] == [
        ["C3", "production", "yes", "pass"],
        ["C3", "equal weights", "no", "fail"],
        ["C5", "production", "yes", "pass"],
        ["C5", "equal weights", "no", "fail"],
    ]
