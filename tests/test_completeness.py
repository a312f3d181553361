"""The benchmark_complete check: every level has its requests, or the run records why not."""

from __future__ import annotations

from datetime import UTC, datetime

from assets.benchmark import completeness
from strix_pipeline.config import load_config
from strix_pipeline.records import LevelAggregate, RunRecord, RunResult


def _result(counts: dict[int, int], status: str = "ok", reason: str | None = None) -> RunResult:
    run = RunRecord(
        "r1", "local", "llamacpp", "llamacpp", None, None, None, "gemma3-270m", "Gemma 3 270M", "Q4_K_M",
        "standard", "quick", "fp", "0.1.0", None, None, None, status, reason, None,
        datetime.now(UTC), datetime.now(UTC),
    )  # fmt: skip
    aggs = [LevelAggregate("r1", "smoke", 1, "single", 2, 0, 1.0)]
    aggs += [
        LevelAggregate("r1", "concurrency_sweep", lvl, "concurrency", n, 0, 1.0) for lvl, n in counts.items()
    ]
    for s in ("prefill_ladder", "decode", "prefix_cache"):
        aggs.append(LevelAggregate("r1", s, 128, "input_tokens", 1, 0, 1.0))
    return RunResult(run=run, aggregates=aggs)


def test_complete_levels_pass():
    config = load_config()
    levels = config.profiles["quick"].concurrency_sweep
    ok, msg = completeness(config, _result(dict.fromkeys(levels.levels, levels.requests_per_level)))
    assert ok, msg


def test_a_short_level_without_a_reason_fails_and_says_which():
    config = load_config()
    ok, msg = completeness(config, _result({1: 4, 2: 4, 4: 1, 5: 4}))
    assert not ok
    assert "concurrency_sweep@4: 1 of 4 requests" in msg


def test_a_short_level_with_a_recorded_reason_passes_with_a_note():
    config = load_config()
    reason = "concurrency_sweep c=4: stopped at max duration 90s after 1/4 requests"
    ok, msg = completeness(config, _result({1: 4, 2: 4, 4: 1, 5: 4}, reason=reason))
    assert ok and "cut short, recorded" in msg


def test_a_missing_level_fails_and_a_failed_run_needs_its_reason():
    config = load_config()
    ok, msg = completeness(config, _result({1: 4, 2: 4, 4: 4}))
    assert not ok and "concurrency_sweep@5: no aggregate" in msg
    assert completeness(config, _result({}, status="failed_start", reason="exited with code 1"))[0]
    assert not completeness(config, _result({}, status="failed_start", reason=None))[0]
