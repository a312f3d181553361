"""The switch decision: the criteria and verdicts on plain evidence (evidence, freshness, quantization
flags), and on seeded warehouses what gathering reads (the evidence, the history)."""

from __future__ import annotations

import ast
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from support.decision_seed import (
    GIB,
    SEPT,
    evidence_of,
    held_facts,
    judge_runs,
    local_llamacpp_record,
    make_config,
    release_image,
    run_record,
    run_result,
    seeded,
    september_runs,
    switch_runs,
    ttft_sample,
)

from strix_pipeline.analysis import decision as decision_package
from strix_pipeline.analysis.decision import (
    CRITERIA,
    CRITERION_FUNCTIONS,
    Evidence,
    RunFacts,
    decision_markdown,
    evaluate,
    gather_evidence,
    memory_not_above_llamacpp,
    verdict_of,
)
from strix_pipeline.stats.quantiles import quantile_ratio_ci


def by_id(decision):
    return {c.criterion: c for c in decision.criteria}


def test_each_criterion_is_a_function_of_its_name():
    assert list(CRITERION_FUNCTIONS) == list(CRITERIA)
    assert {cid: f.__name__ for cid, f in CRITERION_FUNCTIONS.items()} == CRITERIA


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_criteria_and_the_verdict_read_no_warehouse():
    """Judging is pure: only gather and replay run SQL, so the criteria are tested on plain evidence."""
    root = Path(decision_package.__file__).parent
    files = [root / f"{name}.py" for name in ("evidence", "verdict", "outcome", "matchup_table")]
    files += sorted((root / "criteria").glob("*.py"))  # one module per criterion
    assert len(files) > 5
    for path in files:
        imported = _imports(path)
        sql = {m for m in imported if m.split(".")[0] in ("duckdb", "polars") or ".warehouse" in m}
        assert not sql and "strix_pipeline.analysis.decision.gather" not in imported, (path.name, sql)


def _facts(run_id: str, engine: str, held_gib: float) -> RunFacts:
    return held_facts(run_id, engine, held_gib)


def test_a_criterion_judges_hand_made_evidence():
    ev = Evidence(now=SEPT, window_start=SEPT - timedelta(days=1), runs=(_facts("c", "vllm", 19.0),))
    c5 = memory_not_above_llamacpp(ev, make_config())
    assert c5.status == "unknown" and "llamacpp runs with held memory: none" in c5.reason
    ev = replace(ev, runs=(*ev.runs, _facts("b", "llamacpp", 19.5)))
    c5 = memory_not_above_llamacpp(ev, make_config())  # 19 GiB held, not above 19.5
    assert (c5.status, c5.evidence_run_ids, c5.unit) == ("pass", ["c", "b"], "bytes")
    ev = replace(ev, runs=(_facts("c", "vllm", 21.0), ev.runs[1]))
    assert memory_not_above_llamacpp(ev, make_config()).status == "fail"


def test_september_state_is_evaluate_with_evidence():
    d = judge_runs(september_runs(), make_config(), SEPT + timedelta(days=1))
    c = by_id(d)
    assert d.verdict == "evaluate"
    assert [c[k].status for k in ("C1", "C2", "C3", "C4", "C5")] == ["pass", "pass", "pass", "fail", "fail"]
    assert c["C1"].evidence_run_ids == ["vllm-qwen"] and c["C1"].image_digests == ["sha256:" + "a" * 64]
    assert c["C2"].evidence_run_ids == ["vllm-qwen"]
    assert c["C3"].evidence_run_ids == ["vllm-qwen", "llama-qwen"]
    # C3 is the ratio of the two p95s, its interval from both runs' raw TTFTs (distribution-free)
    assert c["C3"].value == pytest.approx(820.0 / 1450.0) and c["C3"].threshold == 1.0
    lo, hi = quantile_ratio_ci(ttft_sample(820.0), ttft_sample(1450.0))
    assert (c["C3"].ci_low, c["C3"].ci_high) == (lo, hi) and hi < 1.0
    assert c["C3"].unit == "ratio" and "faster with confidence" in c["C3"].reason
    assert set(c["C3"].image_digests) == {"sha256:" + "a" * 64, "sha256:" + "b" * 64}
    assert c["C4"].evidence_run_ids == ["vllm-gptoss"] and "MXFP4 MoE kernels" in c["C4"].reason
    assert c["C5"].value == pytest.approx(41.5 * GIB) and c["C5"].threshold == pytest.approx(19 * GIB)
    # BF16 on vLLM vs Q4_K_M GGUF on llama-server: flagged wherever engines are compared
    assert c["C3"].quantization_mismatch and c["C5"].quantization_mismatch
    assert not c["C1"].quantization_mismatch and not c["C4"].quantization_mismatch
    assert all(r.verdict == "evaluate" for r in d.criteria)


def test_evaluate_stamps_the_evaluation_on_every_criterion(tmp_path):
    wh = seeded(tmp_path / "w.duckdb", september_runs())
    d = evaluate(wh, make_config(), now=SEPT + timedelta(days=1))
    c = by_id(d)
    assert d.verdict == "evaluate"
    assert all(r.evaluation_id == d.evaluation_id and r.verdict == "evaluate" for r in d.criteria)
    assert c["C1"].first_held_at == d.evaluated_at and c["C4"].first_held_at is None


@pytest.mark.parametrize("runs", [september_runs, switch_runs])
def test_gathering_from_the_warehouse_gives_the_records_evidence(tmp_path, runs):
    now = SEPT + timedelta(days=1)
    images = [release_image("v0.11.0", "a", SEPT, SEPT), release_image("v0.12.0", "c", SEPT, now)]
    wh = seeded(tmp_path / "w.duckdb", runs())
    wh.upsert_images(images)
    config = make_config()
    got, want = gather_evidence(wh, config, now), evidence_of(runs(), config, now, images)
    assert replace(got, ttfts={}, slo_requests={}) == replace(want, ttfts={}, slo_requests={})
    assert {r.run_id: list(got.ttfts[r.run_id]) for r in got.runs} == want.ttfts
    assert {r.run_id: list(got.slo_requests[r.run_id]) for r in got.runs} == want.slo_requests


def test_gathering_reads_the_decision_host_and_engines_as_they_stood_at_now(tmp_path):
    now = SEPT + timedelta(days=1)
    elsewhere = [
        run_result(run_record("other-host", "vllm", host="local", tag="v0.11.0")),
        run_result(run_record("sglang-run", "sglang", repo="lmsysorg/sglang")),
        run_result(run_record("still-running", "vllm", started_at=now - timedelta(minutes=10))),
        run_result(run_record("after-now", "llamacpp", started_at=now + timedelta(hours=1))),
    ]
    wh = seeded(tmp_path / "w.duckdb", september_runs() + elsewhere)
    wh.upsert_images([release_image("v0.12.0", "c", SEPT, now + timedelta(hours=1))])  # seen later
    ev = gather_evidence(wh, make_config(), now)
    assert sorted(r.run_id for r in ev.runs) == ["llama-qwen", "vllm-gptoss", "vllm-qwen"]
    assert ev.images == () and ev.window_start == now - timedelta(days=make_config().decision.freshness_days)
    assert sorted(ev.sweep) == ["llama-qwen", "vllm-qwen"]  # the two with a sweep at 5 clients


def test_all_pass_is_switch():
    d = judge_runs(switch_runs(), make_config(), SEPT + timedelta(days=1))
    assert d.verdict == "switch", decision_markdown(d)
    assert all(c.status == "pass" for c in d.criteria)
    assert by_id(d)["C4"].evidence_run_ids == ["vllm-gptoss"]


def test_no_candidate_runs_is_unknown():
    runs = [r for r in september_runs() if r.run.engine == "llamacpp"]
    d = judge_runs(runs, make_config(), SEPT + timedelta(days=1))
    assert d.verdict == "unknown"
    assert all(c.status == "unknown" for c in d.criteria)
    assert all("no vllm run on host strix-halo" in c.reason for c in d.criteria)


def test_evidence_older_than_window_is_unknown():
    d = judge_runs(september_runs(), make_config(freshness_days=14), SEPT + timedelta(days=20))
    assert d.verdict == "unknown"
    assert all(c.status == "unknown" for c in d.criteria)
    assert "older than the 14-day freshness window" in by_id(d)["C1"].reason
    # the same data inside the window decides
    assert judge_runs(
        september_runs(), make_config(freshness_days=30), SEPT + timedelta(days=20)
    ).verdict == ("evaluate")


def test_baseline_stale_makes_c3_c5_unknown():
    runs = september_runs()
    runs[2].run.started_at = SEPT - timedelta(days=40)
    c = by_id(judge_runs(runs, make_config(), SEPT + timedelta(days=1)))
    assert c["C3"].status == "unknown" and "llamacpp" in c["C3"].reason
    assert c["C5"].status == "unknown"


def test_equal_quantization_is_not_flagged():
    runs = switch_runs()
    runs[2].run.quantization = "BF16"
    c = by_id(judge_runs(runs, make_config(), SEPT + timedelta(days=1)))
    assert not c["C3"].quantization_mismatch and not c["C5"].quantization_mismatch


@pytest.mark.parametrize(
    ("status", "launch_command", "expected"),
    [
        ("cancelled", None, "unknown"),  # stopped before the engine was up: no evidence either way
        ("failed_guard", None, "unknown"),  # refused before anything started
        ("cancelled", "vllm serve /models/qwen", "pass"),  # cancelled mid-suite: it had reached ready
        ("failed_start", None, "fail"),
    ],
)
def test_c1_counts_only_runs_that_tried_to_start(status, launch_command, expected):
    # without gpt-oss's failed start, the Qwen run is C1's only evidence for this release
    runs = [r for r in september_runs() if r.run.run_id != "vllm-gptoss"]
    runs[0].run.status, runs[0].run.launch_command = status, launch_command
    runs[0].run.failure_reason = f"{status} for the test"
    c1 = by_id(judge_runs(runs, make_config(), SEPT + timedelta(days=1)))["C1"]
    assert c1.status == expected, c1.reason
    if expected == "unknown":
        assert status in c1.reason and c1.evidence_run_ids == ["vllm-qwen"]


def test_c1_fail_is_stay_and_c3_loss_is_not_evaluate():
    runs = september_runs()
    runs[0].run.status = "failed_start"
    runs[0].run.failure_reason = "hipErrorNoBinaryForGpu"
    d = judge_runs(runs, make_config(), SEPT + timedelta(days=1))
    assert d.verdict == "stay" and by_id(d)["C1"].status == "fail"
    assert "hipErrorNoBinaryForGpu" in by_id(d)["C1"].reason
    slow = september_runs()
    slow[0] = run_result(slow[0].run, ttft5=(2000.0, 1900.0, 2100.0))
    d2 = judge_runs(slow, make_config(), SEPT + timedelta(days=1))
    assert by_id(d2)["C3"].status == "fail" and d2.verdict == "stay"


def test_c4_converted_weights_do_not_count():
    runs = switch_runs()
    runs[1].run.quantization = "BF16"  # someone converted the MXFP4 weights
    c = by_id(judge_runs(runs, make_config(), SEPT + timedelta(days=1)))
    assert c["C4"].status == "fail" and "MXFP4" in c["C4"].reason


def test_required_set_is_configurable():
    d = judge_runs(september_runs(), make_config(required=["C1", "C2", "C3"]), SEPT + timedelta(days=1))
    assert d.verdict == "switch"
    assert not by_id(d)["C4"].required and by_id(d)["C1"].required


def test_newer_release_without_run_makes_c1_unknown():
    newer = [release_image("v0.12.0", "c", SEPT, SEPT)]
    c = by_id(judge_runs(september_runs(), make_config(), SEPT + timedelta(days=1), newer))
    assert c["C1"].status == "unknown" and "v0.12.0" in c["C1"].reason


def test_local_default_host_is_unknown_with_reasons():
    local = local_llamacpp_record()
    d = judge_runs([run_result(local, ttft5=(40.0, 35.0, 45.0))], make_config(host="local"), SEPT)
    assert d.verdict == "unknown"
    assert len(d.criteria) == 5
    assert all(c.status == "unknown" and c.reason for c in d.criteria)


def test_history_first_held_and_previous_verdict(tmp_path):
    wh = seeded(tmp_path / "w.duckdb", september_runs())
    cfg = make_config()
    first = evaluate(wh, cfg, now=SEPT + timedelta(hours=2))
    wh.save_decision(first.criteria)
    wh.load_run(switch_runs()[1])  # gpt-oss starts serving a day later
    second = evaluate(wh, cfg, now=SEPT + timedelta(days=2))
    c = by_id(second)
    assert second.previous_verdict == "evaluate"
    assert c["C1"].first_held_at == first.evaluated_at  # held since the first evaluation
    assert c["C4"].status == "pass" and c["C4"].first_held_at == second.evaluated_at
    assert ("C4", "fail", "pass") in second.changed_criteria()


@pytest.mark.parametrize(
    ("statuses", "required", "verdict"),
    [
        ("ppppp", "12345", "switch"),
        ("pppff", "12345", "evaluate"),
        ("pppuf", "12345", "unknown"),  # unknown outranks evaluate: never a verdict without evidence
        ("fuuuu", "12345", "stay"),  # a failed C1 decides even with the rest unknown
        ("pfppp", "12345", "stay"),
        ("ppfpp", "12345", "stay"),  # serves, but not faster
        ("ppfff", "12345", "stay"),  # not faster: C3's fail is not outranked by evaluate
        ("ppfuu", "12345", "unknown"),  # only C1/C2 failing outranks a criterion without evidence
        ("pppuu", "123", "switch"),  # C4/C5 not required
        ("fpppp", "2345", "switch"),  # C1 not required
    ],
)
def test_verdict_rules(statuses, required, verdict):
    full = {"p": "pass", "f": "fail", "u": "unknown"}
    st = {f"C{i + 1}": full[s] for i, s in enumerate(statuses)}
    assert verdict_of(st, [f"C{r}" for r in required])[0] == verdict


def test_markdown_renders():
    md = decision_markdown(judge_runs(september_runs(), make_config(), SEPT + timedelta(days=1)))
    assert "**Verdict: `evaluate`**" in md
    criteria, matchups = md.split("**C3 and C5 on both match-ups**")
    rows = [line for line in criteria.splitlines() if line.startswith("| C")]
    assert [r.split("|")[1].strip() for r in rows] == ["C1", "C2", "C3", "C4", "C5"]
    assert "820 ms" in md and "0.57x" in md and "⚠️ yes" in md and "vllm-qwen" in md
    # C3 and C5 again, on each match-up: the production match-up decides
    rows = [
        [cell.strip() for cell in r.split("|")[1:5]] for r in matchups.splitlines() if r.startswith("| C")
    ]
    assert [r[:3] for r in rows] == [
        ["C3", "production", "yes"],
        ["C3", "equal weights", "no"],
        ["C5", "production", "yes"],
        ["C5", "equal weights", "no"],
    ]


def test_community_image_does_not_stand_in_for_the_official_one():
    runs = september_runs()
    runs[0] = run_result(runs[0].run, smoke_ok=False, ttft5=(820.0, 760.0, 900.0))
    community = run_record(
        "kyuz0-qwen",
        "vllm",
        repo="kyuz0/vllm-therock-gfx1151",
        tag="latest",
        digest="sha256:" + "d" * 64,
        started_at=SEPT + timedelta(hours=3),
        held_gib=10.0,
    )
    runs.append(run_result(community, ttft5=(300.0, 280.0, 320.0)))
    d = judge_runs(runs, make_config(), SEPT + timedelta(days=1))
    c = by_id(d)
    assert c["C1"].status == "pass" and c["C2"].status == "fail" and d.verdict == "stay"
    assert "kyuz0-qwen" not in c["C2"].evidence_run_ids + c["C3"].evidence_run_ids + c["C5"].evidence_run_ids
