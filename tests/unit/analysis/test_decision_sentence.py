"""The week's answer in one sentence: the verdict, the criterion that decided it with its
figure and interval, and what would change it; for an unknown verdict, which criterion lacks evidence
and what run would give it."""

from __future__ import annotations

from dataclasses import replace

from support.decision_seed import SEPT, make_config

from strix_pipeline.analysis.decision import (
    CRITERIA,
    Decision,
    Wording,
    change_needed,
    headline,
    no_evaluation_sentence,
    ratio_x,
    verdict_sentence,
    wording_of,
)
from strix_pipeline.records import CriterionResult
from strix_pipeline.units import GIB

W = Wording("vLLM", "llama-server", "0.32.0", 5, "qwen3-30b-a3b", "gpt-oss-120b")


def crit(cid: str, status: str, **kw: object) -> CriterionResult:
    fields: dict = {
        "value": None,
        "threshold": None,
        "ci_low": None,
        "ci_high": None,
        "unit": None,
        "evidence_run_ids": [],
        "reason": f"{cid} reason",
        "required": True,
    } | kw
    return CriterionResult(
        "e1",
        SEPT,
        "local",
        "",
        cid,
        CRITERIA[cid],
        fields["required"],
        status,
        fields["value"],
        fields["threshold"],
        fields["ci_low"],
        fields["ci_high"],
        fields["unit"],
        fields["evidence_run_ids"],
        [],
        False,
        fields["reason"],
        None,
    )


def decision(verdict: str, *criteria: CriterionResult, provisional: bool = False) -> Decision:
    return Decision(verdict, "e1", SEPT, "local", list(criteria), provisional=provisional)


C3_SLOW = crit("C3", "fail", value=2.88, threshold=1.0, ci_low=2.57, ci_high=3.30, unit="ratio")
C5_FAIL = crit("C5", "fail", value=6.6 * GIB, threshold=0.5 * GIB, unit="bytes")


def test_make_runs_stay_names_c3s_figure_its_interval_and_what_would_change_it() -> None:
    d = decision(
        "stay",
        crit("C1", "pass"),
        crit("C2", "unknown", required=False),
        C3_SLOW,
        crit("C4", "unknown", required=False),
        C5_FAIL,
    )
    assert verdict_sentence(d, W) == (
        "Stay: keep llama-server. vLLM 0.32.0's TTFT p95 at 5 clients is 2.9× llama-server's "
        "(95 % interval 2.6–3.3×); switching needs it below 1.0× and C5 to pass."
    )


def test_evaluate_says_what_passed_and_which_failures_stand_between() -> None:
    c3 = crit("C3", "pass", value=0.57, threshold=1.0, ci_low=0.52, ci_high=0.61, unit="ratio")
    d = decision("evaluate", crit("C1", "pass"), crit("C2", "pass"), c3, crit("C4", "fail"), C5_FAIL)
    text = verdict_sentence(d, W)
    assert text.startswith(
        "Not yet: stay on llama-server for now. vLLM 0.32.0 starts and its TTFT p95 at 5 clients is "
        "0.57× llama-server's"
    )
    assert "(95 % interval 0.52–0.61×)" in text
    assert "C4 (serves gpt-oss-120b from MXFP4) fails" in text
    # the threshold said for what it is: llama-server's own held memory (no tolerance configured)
    assert "it holds 6.6 GiB after load, 13.2× llama-server's memory" in text
    assert "(C5 allows no more than llama-server's own 0.50 GiB)" in text
    assert "allowed against" not in text
    assert text.endswith("switching needs C4 and C5 to pass.")


def test_a_failed_start_keeps_production_and_says_why() -> None:
    d = decision("stay", crit("C1", "fail", reason="0.33.0 did not reach ready on local (failed_start: HIP)"))
    assert verdict_sentence(d, W) == (
        "Stay: keep llama-server. C1 (the official image starts) fails: 0.33.0 did not reach ready on local "
        "(failed_start: HIP); switching needs C1 to pass."
    )


def test_unknown_names_the_criterion_without_evidence_and_the_run_that_would_give_it() -> None:
    d = decision(
        "unknown",
        crit("C1", "pass"),
        crit("C3", "pass", value=0.5, threshold=1.0, ci_low=0.4, ci_high=0.6),
        crit("C5", "unknown", reason="llamacpp runs with held memory: none"),
    )
    assert verdict_sentence(d, W) == (
        "Can't tell yet: C5 (memory held not above llama-server's) has no fresh "
        "evidence (llamacpp runs with held memory: none); vLLM and llama-server runs with memory "
        "readings on local would give it."
    )
    inconclusive = crit("C3", "unknown", value=0.98, threshold=1.0, ci_low=0.9, ci_high=1.07)
    text = verdict_sentence(decision("unknown", crit("C1", "pass"), inconclusive), W)
    assert "C3 is inconclusive: vLLM 0.32.0's TTFT p95 at 5 clients is 0.98× llama-server's" in text
    assert "(95 % interval 0.90–1.07× contains 1.0×)" in text
    assert "more measured requests at 5 clients on both engines would narrow the interval" in text
    several = decision("unknown", crit("C1", "unknown"), crit("C2", "unknown"))
    assert verdict_sentence(several, W) == (
        "Can't tell yet: C1 and C2 have no fresh evidence; on local, a run of the "
        "newest official vLLM release image (C1); a vLLM run of qwen3-30b-a3b with a valid smoke answer "
        "(C2) would give it."
    )


def test_a_switch_says_when_it_is_provisional() -> None:
    c3 = crit("C3", "pass", value=0.57, threshold=1.0, ci_low=0.52, ci_high=0.61)
    assert verdict_sentence(decision("switch", c3), W) == (
        "Switch: move to vLLM 0.32.0. Every required criterion passes, its TTFT p95 at 5 clients is 0.57× "
        "llama-server's (95 % interval 0.52–0.61×); it would stay on llama-server if a required "
        "criterion failed."
    )
    assert verdict_sentence(decision("switch", c3, provisional=True), W).startswith(
        "Switch: move to vLLM 0.32.0, provisionally. "
    )


def test_a_ratio_next_to_its_threshold_is_never_rounded_onto_it() -> None:
    assert ratio_x(2.88) == "2.9" and ratio_x(0.574) == "0.57" and ratio_x(1.0) == "1.0"
    assert ratio_x(1.04, 1.0) == "1.04" and ratio_x(0.996, 1.0) == "1.00"  # "1.0" would read as equal
    assert ratio_x(1.0, 1.0) == "1.0"


def test_the_wording_takes_the_engines_names_and_the_candidate_runs_version() -> None:
    c3 = crit("C3", "fail", value=2.0, evidence_run_ids=["cand", "base"])
    w = wording_of(
        make_config("local"),
        decision("stay", crit("C1", "pass", evidence_run_ids=["old"]), c3),
        {"cand": "0.32.0", "old": "0.31.0"},
    )
    assert (w.candidate, w.baseline_engine, w.concurrency) == ("vLLM 0.32.0", "llama-server", 5)
    assert wording_of(make_config("local"), None, {}).candidate == "vLLM"


def test_the_answer_opens_with_a_plain_yes_or_no_per_verdict() -> None:
    """Each verdict's first words; the verdict's name in the data is unchanged ("evaluate")."""
    c3 = crit("C3", "pass", value=0.57, threshold=1.0, ci_low=0.52, ci_high=0.61)
    c5 = crit(
        "C5", "fail", value=6.41 * GIB, threshold=0.48 * GIB, unit="bytes", reason="a; at the same context"
    )
    cases = {
        "evaluate": decision("evaluate", crit("C1", "pass"), c3, c5),
        "stay": decision("stay", crit("C1", "fail")),
        "switch": decision("switch", c3),
        "unknown": decision("unknown", crit("C1", "unknown")),
    }
    words = {"evaluate": "Not yet:", "stay": "Stay:", "switch": "Switch:", "unknown": "Can't tell yet:"}
    for verdict, d in cases.items():
        assert d.verdict == verdict
        assert verdict_sentence(d, W).startswith(words[verdict])
        assert headline(verdict) == words[verdict]
    # the ratio in words, at the same context where C5's reason says so
    assert "13.4× llama-server's memory at the same context" in verdict_sentence(cases["evaluate"], W)
    assert change_needed(cases["evaluate"], W) == "switching needs C5 to pass"
    assert no_evaluation_sentence("local", W).startswith("Can't tell yet:")


def test_a_tolerance_is_named_beside_the_baselines_own_figure() -> None:
    w = replace(W, memory_tolerance_pct=5.0)
    c5 = crit("C5", "fail", value=6.41 * GIB, threshold=0.48 * 1.05 * GIB, unit="bytes")
    d = decision("evaluate", crit("C1", "pass"), c5)
    assert "C5 allows 0.50 GiB: llama-server's own 0.48 GiB plus the 5 % tolerance" in verdict_sentence(d, w)
