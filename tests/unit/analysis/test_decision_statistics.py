"""C1 means starts, C3 with a checked interval, provisional switch, replays."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from support.decision_seed import (
    SEPT,
    c3_pairs_record,
    evidence_of,
    judge_runs,
    make_config,
    release_image,
    run_record,
    run_result,
    seeded,
    september_runs,
    switch_runs,
    with_c3_pairs,
)
from support.paths import REPO as REPO_ROOT

from strix_pipeline.analysis.decision import evaluate, judge, reproduce, stored_decision
from strix_pipeline.cli import decide as cli_decide
from strix_pipeline.config import SweepSpec
from strix_pipeline.config_load import load_config
from strix_pipeline.registry.versions import version_sort_key
from strix_pipeline.stats.quantiles import min_samples_for_ci, quantile_ci, quantile_ratio_ci
from strix_pipeline.warehouse import Warehouse

NOW = SEPT + timedelta(days=1)


def by_id(decision):
    return {c.criterion: c for c in decision.criteria}


# ---------------------------------------------------------------------------------------------- C1


def test_official_image_that_starts_but_fails_its_smoke_passes_c1_and_fails_c2():
    runs = september_runs()
    runs[0].run.status = "failed_serve"
    runs[0].run.failure_reason = "the smoke request did not return valid output"
    runs[0] = run_result(runs[0].run, smoke_ok=False, ttft5=None)
    d = judge_runs(runs, make_config(), NOW)
    c = by_id(d)
    assert c["C1"].status == "pass" and c["C1"].evidence_run_ids == ["vllm-qwen"]
    assert c["C2"].status == "fail" and "smoke" in c["C2"].reason
    assert d.verdict == "stay"


def test_a_run_that_never_became_ready_fails_c1():
    runs = september_runs()
    runs[0].run.status = "failed_start"
    runs[0].run.failure_reason = "hipErrorNoBinaryForGpu"
    c = by_id(judge_runs(runs, make_config(), NOW))
    assert c["C1"].status == "fail"


def test_an_override_does_not_count_as_starting():
    runs = september_runs()
    runs[0].run.launch_command = "docker run -e HSA_OVERRIDE_GFX_VERSION=11.0.0 vllm/vllm-openai-rocm"
    c = by_id(judge_runs(runs, make_config(), NOW))
    assert c["C1"].status == "fail"


# ------------------------------------------------------------------------- the interval and C3


def test_order_statistic_interval_is_na_below_its_minimum_n():
    assert min_samples_for_ci(95, 0.95) == 72
    assert min_samples_for_ci(95, 0.95**0.5) == 86  # each run's share of C3's ratio interval
    assert quantile_ci(list(range(1, 72))) == (None, None)
    lo, hi = quantile_ci([float(v) for v in range(1, 101)])
    assert (lo, hi) == (90.0, 100.0)  # X(90), X(100) of 1..100
    assert quantile_ratio_ci([1.0] * 85, [1.0] * 200) == (None, None)


def _coverage_module():
    spec = importlib.util.spec_from_file_location("ci_coverage", REPO_ROOT / "benchmarks" / "ci_coverage.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ci_coverage"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_coverage_simulation_fast_version():
    """The benchmark's simulation, small: the chosen intervals cover, the old bootstrap did not."""
    cov = _coverage_module()
    logn = cov.DISTS[0]  # lognormal sigma 0.5, the case
    old = cov.coverage("bootstrap", logn, 10, 150, seed=3)
    assert old.coverage < 0.65  # ~44 % at n = 10
    for method, n in (("order-stat", 100), ("ratio order-stat", 200)):
        for dist in cov.DISTS:
            cell = cov.coverage(method, dist, n, 150, seed=3)
            assert cell.undefined == 0 and cell.coverage >= 0.92, cell
    short = cov.coverage("ratio order-stat", logn, 40, 20, seed=3)
    assert short.undefined == 20 and short.covered == 0  # n/a, never counted as a cover
    assert "coverage" in cov.render([short])


def test_c3_passes_only_when_faster_with_confidence():
    c = by_id(judge_runs(september_runs(), make_config(), NOW))["C3"]
    assert c.status == "pass" and c.ci_high < c.threshold == 1.0
    assert "820 ms" in c.reason and "1450 ms" in c.reason and "n=200" in c.reason


def test_c3_fails_only_when_slower_with_confidence():
    runs = september_runs()
    runs[0] = run_result(runs[0].run, ttft5=(2000.0, 0.0, 0.0))
    c = by_id(judge_runs(runs, make_config(), NOW))["C3"]
    assert c.status == "fail" and c.ci_low > 1.0 and "not faster, with confidence" in c.reason


def test_c3_is_unknown_inconclusive_on_overlapping_data():
    runs = september_runs()
    runs[0] = run_result(runs[0].run, ttft5=(1400.0, 0.0, 0.0))  # 3 % faster: inside the noise
    d = judge_runs(runs, make_config(), NOW)
    c = by_id(d)["C3"]
    assert c.status == "unknown" and c.ci_low < 1.0 < c.ci_high
    assert c.reason.startswith("inconclusive") and "1400 ms" in c.reason and "1450 ms" in c.reason
    assert d.verdict == "unknown"


def test_c3_margin_moves_the_line():
    c = by_id(judge_runs(september_runs(), make_config(ttft_margin_pct=40), NOW))["C3"]  # 0.57: needs < 0.6
    assert c.threshold == pytest.approx(0.6) and c.status == "unknown"  # its interval straddles 0.6
    assert by_id(judge_runs(september_runs(), make_config(ttft_margin_pct=20), NOW))["C3"].status == "pass"


def test_c3_with_too_few_requests_is_na_not_a_verdict():
    runs = september_runs()
    runs[0] = run_result(runs[0].run, ttft5=(820.0, 0.0, 0.0), n5=4)  # the quick profile's count
    runs[2] = run_result(runs[2].run, ttft5=(1450.0, 0.0, 0.0), n5=4)
    c = by_id(judge_runs(runs, make_config(), NOW))["C3"]
    assert c.status == "unknown" and c.ci_low is None and c.ci_high is None
    assert "inconclusive" in c.reason and "n/a" in c.reason and ">= 86" in c.reason
    assert "820 ms" in c.reason and "1450 ms" in c.reason and "n=4" in c.reason


def test_standard_profile_measures_enough_at_the_decision_concurrency():
    config = load_config(REPO_ROOT / "strix_pipeline" / "default.toml")
    standard = config.profiles["standard"].concurrency_sweep
    level = config.decision.concurrency
    assert standard.requests_for(level) == 200 >= min_samples_for_ci(95, 0.95**0.5)
    assert standard.requests_for(1) == standard.requests_per_level == 40
    assert standard.max_duration_for(level) == standard.max_duration_s * 5
    # the CPU demo keeps its other levels tiny but measures enough at the decision's level for C3
    quick = config.profiles["quick"].concurrency_sweep
    assert [quick.requests_for(x) for x in quick.levels if x != level] == [4] * (len(quick.levels) - 1)
    assert quick.requests_for(level) >= min_samples_for_ci(95, 0.95**0.5)
    assert SweepSpec(requests_per_level=3).requests_at == {}  # sizing its own levels sizes them all


# ---------------------------------------------------------------------------- provisional switch


def test_switch_on_one_run_is_provisional_and_stored_so(tmp_path):
    wh = seeded(tmp_path / "w.duckdb", switch_runs())
    d = evaluate(wh, make_config(), now=NOW)
    assert d.verdict == "switch" and d.provisional and d.label == "switch (provisional)"
    assert "provisional" in d.reason and "vllm-gptoss" in d.reason
    wh.save_decision(d.criteria)
    back = stored_decision(wh, d.evaluation_id)
    assert back.provisional and all(c.provisional for c in back.criteria)


def test_switch_on_one_run_is_provisional_on_plain_evidence():
    d = judge_runs(switch_runs(), make_config(), NOW)
    assert d.verdict == "switch" and d.provisional and d.label == "switch (provisional)"
    assert "provisional" in d.reason and "vllm-gptoss" in d.reason
    assert all(c.provisional for c in d.criteria)


def test_switch_is_confirmed_when_a_repeat_run_agrees():
    runs = switch_runs()
    repeat = run_result(
        run_record(
            "vllm-gptoss-2",
            "vllm",
            started_at=SEPT + timedelta(hours=5),
            profile="gpt-oss-120b",
            quant="MXFP4",
            digest="sha256:" + "a" * 64,
        )
    )
    config = make_config()
    # with the interleaved pairs a night adds: without them the switch rests on single runs
    pairs = c3_pairs_record([*runs, repeat], config, NOW)
    d = judge(with_c3_pairs(evidence_of([*runs, repeat], config, NOW), pairs), config)
    assert d.verdict == "switch" and not d.provisional and d.label == "switch"


def test_switch_is_confirmed_when_the_next_version_agrees():
    older = []
    for r, t5 in zip(switch_runs(SEPT - timedelta(days=3))[:2], [(800.0, 0.0, 0.0), None], strict=True):
        run = replace(
            r.run,
            run_id=r.run.run_id + "-old",
            image_tag="v0.10.0",
            image_version="v0.10.0",
            image_sort_key=version_sort_key("v0.10.0", None),
            image_digest="sha256:" + "9" * 64,
        )
        older.append(run_result(run, ttft5=t5))
    config = make_config()
    pairs = c3_pairs_record(older + switch_runs(), config, NOW)
    d = judge(with_c3_pairs(evidence_of(older + switch_runs(), config, NOW), pairs), config)
    assert d.verdict == "switch" and not d.provisional


# -------------------------------------------------------------------------------- reproduction


def _later_noise(wh, at: datetime) -> None:
    """What the warehouse gains after an evaluation: a later run, a newer image, a later evaluation."""
    later = run_result(
        run_record("vllm-later", "vllm", started_at=at + timedelta(hours=1), tag="v0.11.0", held_gib=5.0),
        ttft5=(100.0, 0.0, 0.0),
    )
    wh.load_run(later)
    wh.upsert_images([release_image("v0.13.0", "e", at, at + timedelta(hours=2))])
    wh.save_decision(evaluate(wh, make_config(), now=at + timedelta(hours=3)).criteria)


def _stay_runs():
    runs = september_runs()
    runs[0].run.status = "failed_start"
    runs[0].run.failure_reason = "hipErrorNoBinaryForGpu"
    return runs


def _confirmed_switch_runs():
    repeat = run_result(
        run_record(
            "vllm-gptoss-2",
            "vllm",
            started_at=SEPT + timedelta(hours=5),
            profile="gpt-oss-120b",
            quant="MXFP4",
            digest="sha256:" + "a" * 64,
        )
    )
    return [*switch_runs(), repeat]


VERDICT_CASES = {
    "switch (provisional)": switch_runs,
    "switch": _confirmed_switch_runs,
    "evaluate": september_runs,
    "stay": _stay_runs,
    "unknown": lambda: [r for r in september_runs() if r.run.engine == "llamacpp"],
}


@pytest.mark.parametrize("label", list(VERDICT_CASES))
def test_every_verdict_is_reproduced_from_the_warehouse(tmp_path, label):
    wh = seeded(tmp_path / "w.duckdb", VERDICT_CASES[label]())
    config = make_config()
    if label == "switch":  # confirmed: a repeat run agrees, and C3 stands on interleaved pairs
        wh.save_comparison([c3_pairs_record(VERDICT_CASES[label](), config, NOW - timedelta(hours=6))], [])
    earlier = evaluate(wh, config, now=NOW - timedelta(hours=6))  # history: first_held_at, previous
    wh.save_decision(earlier.criteria)
    d = evaluate(wh, config, now=NOW)
    assert d.label == label
    wh.save_decision(d.criteria)
    _later_noise(wh, NOW)
    stored, again, diffs = reproduce(wh, config, d.evaluation_id)
    assert diffs == [], diffs
    assert again.label == label and again.evaluation_id == d.evaluation_id
    assert [c.first_held_at for c in again.criteria] == [c.first_held_at for c in d.criteria]


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="strix")
    parser.add_argument("--config")
    cli_decide.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_decide_evaluation_reproduces_and_catches_a_tampered_row(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli_decide, "load_config", lambda path=None: make_config())
    path = tmp_path / "w.duckdb"
    wh = seeded(path, september_runs())
    d = evaluate(wh, make_config(), now=NOW)
    wh.save_decision(d.criteria)
    wh.close()
    assert run_cli(["decide", "--evaluation", d.evaluation_id, "--warehouse", str(path)]) == 0
    assert "reproduces: verdict evaluate" in capsys.readouterr().out
    assert run_cli(["decide", "--evaluation", d.evaluation_id, "--json", "--warehouse", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reproduced"] is True and out["recomputed"]["verdict"] == "evaluate"
    with Warehouse.open(path) as w:
        w.con.execute(
            "UPDATE decisions SET status = 'fail' WHERE evaluation_id = ? AND criterion = 'C3'",
            [d.evaluation_id],
        ).fetchall()
    assert run_cli(["decide", "--evaluation", d.evaluation_id, "--warehouse", str(path)]) == 1
    assert "C3.status: stored 'fail', recomputed 'pass'" in capsys.readouterr().out
    assert run_cli(["decide", "--evaluation", "nope", "--warehouse", str(path)]) == 1


def test_naive_and_aware_times_agree():
    assert NOW.tzinfo is UTC
