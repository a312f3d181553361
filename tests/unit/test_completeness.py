"""The benchmark_complete check: every level has its requests, or the run records why not."""

from __future__ import annotations

from datetime import UTC, datetime

from strix_pipeline.config_load import load_config
from strix_pipeline.records import LevelAggregate, RunRecord, RunResult
from strix_pipeline.usable import completeness, served


def _result(
    counts: dict[int, int],
    status: str = "ok",
    reason: str | None = None,
    stopped: dict[int, str] | None = None,
    planned: int | None | str = "profile",
) -> RunResult:
    quick = load_config().profiles["quick"].concurrency_sweep
    run = RunRecord(
        "r1",
        "local",
        "llamacpp",
        "llamacpp",
        None,
        None,
        None,
        "gemma3-270m",
        "Gemma 3 270M",
        "Q4_K_M",
        "standard",
        "quick",
        "fp",
        "0.1.0",
        None,
        None,
        None,
        status,
        reason,
        None,
        datetime.now(UTC),
        datetime.now(UTC),
    )
    aggs = [LevelAggregate("r1", "smoke", 1, "single", 2, 0, 1.0, requests_planned=2)]
    aggs += [
        LevelAggregate(
            "r1",
            "concurrency_sweep",
            lvl,
            "concurrency",
            n,
            0,
            1.0,
            requests_planned=quick.requests_for(lvl) if planned == "profile" else planned,
            stopped_reason=(stopped or {}).get(lvl),
        )
        for lvl, n in counts.items()
    ]
    for s in ("prefill_ladder", "decode", "prefix_cache"):
        aggs.append(LevelAggregate("r1", s, 128, "input_tokens", 1, 0, 1.0))
    aggs.append(LevelAggregate("r1", "quality", 1, "single", 16, 0, 1.0))
    return RunResult(run=run, aggregates=aggs)


def test_complete_levels_pass():
    config = load_config()
    levels = config.profiles["quick"].concurrency_sweep
    ok, msg = completeness(config, _result({lvl: levels.requests_for(lvl) for lvl in levels.levels}))
    assert ok, msg


def test_a_short_level_without_a_reason_fails_and_says_which():
    config = load_config()
    ok, msg = completeness(config, _result({1: 4, 2: 4, 4: 1, 5: 90}))
    assert not ok
    assert "concurrency_sweep@4: 1 of 4 requests" in msg


def test_a_short_level_with_its_reason_recorded_passes_with_a_note():
    config = load_config()
    why = "stopped at max duration 90s after 1/4 requests"
    ok, msg = completeness(config, _result({1: 4, 2: 4, 4: 1, 5: 90}, stopped={4: why}))
    assert ok and f"concurrency_sweep@4: 1 of 4 requests ({why})" in msg
    # the reason must be the short level's own: another level's does not excuse it
    ok, msg = completeness(config, _result({1: 4, 2: 4, 4: 1, 5: 90}, stopped={5: why}))
    assert not ok and "concurrency_sweep@4: 1 of 4 requests, no reason recorded" in msg


def test_a_level_planned_differently_from_the_profile_fails():
    config = load_config()
    ok, msg = completeness(config, _result({1: 3, 2: 3, 4: 3, 5: 3}, planned=3))
    assert not ok and "the suite planned 3 requests, the profile asks for 4" in msg
    # rows from before the plan was recorded (None) are judged on their counts alone
    assert completeness(config, _result({1: 4, 2: 4, 4: 4, 5: 90}, planned=None))[0]


def test_a_missing_level_fails_and_a_failed_run_needs_its_reason():
    config = load_config()
    ok, msg = completeness(config, _result({1: 4, 2: 4, 4: 4}))
    assert not ok and "concurrency_sweep@5: no aggregate" in msg
    # a failure is a result, but a run that measured nothing never passes, reason or not
    ok, msg = completeness(config, _nothing_measured("failed_start", "exited with code 1"))
    assert not ok and "nothing measured: exited with code 1" in msg
    ok, msg = completeness(config, _nothing_measured("failed_start", None))
    assert not ok and "NO REASON RECORDED" in msg
    # a failed run that did measure is judged on its recorded reason
    assert completeness(config, _result({1: 4}, status="failed_serve", reason="smoke output invalid"))[0]
    assert not completeness(config, _result({1: 4}, status="failed_serve", reason=None))[0]


def _nothing_measured(status: str, reason: str | None) -> RunResult:
    return RunResult(run=_result({}, status=status, reason=reason).run)


def test_served_fails_a_run_that_measured_nothing_and_names_why():
    ok, msg = served(
        _nothing_measured("failed_start", "llama-server was killed by SIGILL: illegal instruction")
    )
    assert not ok and msg.startswith("the engine did not start: llama-server was killed by SIGILL")
    ok, msg = served(_nothing_measured("failed_serve", "no request succeeded"))
    assert not ok and msg.startswith("the engine served no request: no request succeeded")
    ok, msg = served(_nothing_measured("failed_guard", "outside the maintenance window"))
    assert not ok and "a guard refused the run" in msg
    # zero-ok aggregates are nothing measured too
    zero = _result({1: 0, 2: 0}, status="failed_serve", reason="all failed")
    zero.aggregates = [a for a in zero.aggregates if a.scenario == "concurrency_sweep"]
    assert not served(zero)[0]
    ok, msg = served(_result({1: 4, 2: 4, 4: 4, 5: 90}))
    assert ok and "succeeded" in msg


def test_memory_check_fails_on_unknown_and_on_not_returned():
    from strix_pipeline.usable import memory_back

    r = _result({1: 4})
    r.run.baseline_bytes, r.run.after_stop_bytes, r.run.memory_returned = 10 * 2**30, 10 * 2**30, True
    ok, why = memory_back(r)
    assert ok and "back at baseline" in why and "10.00 GiB" in why
    r.run.after_stop_bytes, r.run.memory_returned = None, None
    ok, why = memory_back(r)
    assert not ok and why.startswith("unknown") and "after stop unknown" in why
    r.run.after_stop_bytes, r.run.memory_returned = 14 * 2**30, False
    ok, why = memory_back(r)
    assert not ok and "NOT back" in why


def test_the_smoke_level_plans_a_json_request_too_when_the_profile_checks_json():
    config = load_config()  # the quick profile checks JSON: two smoke requests
    assert config.profiles["quick"].smoke.requests == 2
    ok, msg = completeness(config, _result({lvl: n for lvl, n in ((1, 4), (2, 4), (4, 4), (5, 90))}))
    assert ok, msg
    r = _result({1: 4, 2: 4, 4: 4, 5: 90})
    r.aggregates[0].requests_planned = 1  # a smoke level that left the JSON request out
    ok, msg = completeness(config, r)
    assert not ok and "smoke: the suite planned 1 requests, the profile asks for 2" in msg
