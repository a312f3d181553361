"""What a cancel keeps of the scenario it interrupts (no model: the synthetic server, 5 ms per token).

An interrupt (Ctrl-C, Dagster's Terminate) cancels the suite's task (loadgen/loop.py). The requests
that had finished in the level then running are kept as its records, and its aggregate says where and
why it stopped; requests still in flight were cut by the client and are not records. The real-engine
cancels (Dagster, Docker with production) are in test_cancel.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.infra import free_port
from support.synthetic_engine import SMALL, SyntheticEngine
from support.warehouse import make_run

from strix_pipeline.config import SLO, ScenarioProfile
from strix_pipeline.loadgen import SuiteInterrupted, SuiteResult, run_suite
from strix_pipeline.runner import cancelled


def cancelled_suite(
    profile: ScenarioProfile, scenario: str, level: int, done: int, **options: Any
) -> SuiteResult:
    """The suite against a live synthetic engine, its task cancelled when ``scenario`` ``level`` has
    ``done`` requests finished (``options``: more of run_suite's); what it measured."""
    partial = SuiteResult()
    with SyntheticEngine(("none", 0, 0)) as engine:  # never killed: the cancel is the fault

        async def main() -> None:
            task = asyncio.current_task()
            assert task is not None

            def on_request(s: str, lv: int, d: int, total: int) -> None:
                if (s, lv, d) == (scenario, level, done):
                    task.cancel()

            await run_suite(
                engine.url,
                "synthetic/normal",
                profile,
                SLO(),
                "cancel",
                into=partial,
                on_request=on_request,
                **options,
            )

        with pytest.raises(asyncio.CancelledError):
            asyncio.run(main())
    return partial


def test_a_cancelled_level_keeps_the_requests_that_had_finished() -> None:
    # level 2: 4 requests at concurrency 2; cancelled as the 2nd finishes, while 2 more are in flight
    partial = cancelled_suite(SMALL, "concurrency_sweep", 2, 2)
    level2 = [q for q in partial.requests if q.scenario == "concurrency_sweep" and q.level == 2]
    assert [q.ok for q in level2] == [True, True]
    sweep = {a.level: a for a in partial.aggregates if a.scenario == "concurrency_sweep"}
    assert sorted(sweep) == [1, 2]
    cut = sweep[2]
    assert (cut.requests_ok, cut.requests_failed, cut.requests_planned) == (2, 0, 4)
    assert cut.stopped_reason == "stopped after 2/4 requests: cancelled"
    assert cut.ttft_p50_ms is not None  # measured, not a placeholder
    assert sweep[1].requests_ok == 4 and sweep[1].stopped_reason is None
    assert not any(q.scenario == "decode" for q in partial.requests)
    assert (partial.scenario, partial.level, partial.done, partial.planned) == ("concurrency_sweep", 2, 2, 4)


def test_a_cancelled_prefix_cache_keeps_its_finished_pairs() -> None:
    # prefix_cache sends cold, warm, cold, ... one at a time through its own loop: cancelled after 3 of 6
    profile = SMALL.model_copy(update={"scenarios": ["smoke", "prefix_cache"]})
    partial = cancelled_suite(profile, "prefix_cache", 0, 3)
    cold, warm = [a for a in partial.aggregates if a.scenario == "prefix_cache"]
    assert (cold.requests_ok, cold.requests_planned) == (2, 3)
    assert (warm.requests_ok, warm.requests_planned) == (1, 3)
    assert cold.stopped_reason == "stopped after 2/3 requests: cancelled"
    assert warm.stopped_reason == "stopped after 1/3 requests: cancelled"
    assert sum(1 for q in partial.requests if q.scenario == "prefix_cache") == 3


def test_a_cancelled_suite_keeps_what_it_noted_before_the_cancel() -> None:
    """Capped contexts, max-duration stops and the scraper's error are in an interrupted suite's
    errors (so in the cancelled run's failure_reason), as in a finished one's."""
    # level 1: 4 requests of 40 tokens at 5 ms each, capped at 0.1 s; cancelled as level 2 starts
    sweep = SMALL.concurrency_sweep.model_copy(update={"max_duration_s": 0.1})
    profile = SMALL.model_copy(update={"concurrency_sweep": sweep})
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    partial = cancelled_suite(profile, "concurrency_sweep", 2, 0, context_length=600, metrics_url=dead)
    noted = [
        "capped at",  # the sweep's prompt does not fit the 600-token context
        "concurrency_sweep c=1: stopped at max duration 0.1s",
        f"metrics: {dead} unreachable",
    ]
    for note in noted:
        assert any(note in e for e in partial.errors), (note, partial.errors)
    result = make_run("cancelled-run")
    cancelled(result, SuiteInterrupted(partial, asyncio.CancelledError()))
    assert result.run.status == "cancelled"
    for note in noted:
        assert note in (result.run.failure_reason or ""), (note, result.run.failure_reason)
