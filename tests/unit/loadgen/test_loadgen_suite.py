"""The whole suite and `strix bench` against the synthetic server: shapes, caps, open loop, CLI output."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest
from support.synthetic_server import SyntheticServer

from strix_pipeline.cli import bench as cli_bench
from strix_pipeline.config import SLO, ScenarioProfile
from strix_pipeline.loadgen import DatasetLoad, SuiteResult, run_load, run_suite, run_suite_sync
from strix_pipeline.loadgen.workloads import Prompt
from strix_pipeline.quality.items import set_version
from strix_pipeline.records import RunRecord, RunResult
from strix_pipeline.warehouse import Warehouse

TINY = ScenarioProfile.model_validate(
    {
        "request_timeout_s": 30,
        "smoke": {"output_tokens": 16},
        "concurrency_sweep": {
            "levels": [1, 3],
            "requests_per_level": 5,
            "warmup": 2,
            "input_tokens": 64,
            "output_tokens": 6,
        },
        "prefill_ladder": {
            "input_tokens": [64, 128, 4096, 8192],
            "requests_per_level": 2,
            "output_tokens": 4,
        },
        "decode": {"requests": 2, "output_tokens": 12, "input_tokens": 64},
        "prefix_cache": {"prefix_tokens": 256, "suffix_tokens": 16, "output_tokens": 4, "repeats": 2},
    }
)


def suite(profile: ScenarioProfile, n_ctx: int = 8192, **kw: object) -> tuple[SuiteResult, SyntheticServer]:
    async def go() -> tuple[SuiteResult, SyntheticServer]:
        async with SyntheticServer(ttft_ms=3, itl_ms=1, n_ctx=n_ctx) as srv:
            res = await run_suite(
                srv.base_url, "synthetic", profile, SLO(), "run-1", scrape_interval_s=0.05, **kw
            )  # type: ignore[arg-type]
            return res, srv

    return asyncio.run(go())


def test_full_suite_shapes() -> None:
    lines: list[str] = []
    res, srv = suite(TINY, n_ctx=2048, on_progress=lines.append)
    assert res.smoke_ok is True and res.smoke_output and res.smoke_output.startswith(" t0")
    levels = [(a.scenario, a.level) for a in res.aggregates]
    assert levels == [
        ("smoke", 1),
        ("concurrency_sweep", 1),
        ("concurrency_sweep", 3),
        ("prefill_ladder", 64),
        ("prefill_ladder", 128),
        ("prefill_ladder", 2012),
        ("decode", 1),
        ("prefix_cache", 0),
        ("prefix_cache", 1),
        ("quality", 1),  # the evaluation set, one item at a time, after every timed scenario
    ]
    # The ladder was capped at the per-request context, with a note, not an exception.
    assert any("4096, 8192 > context 2048, capped at 2012" in e for e in res.errors)
    sweep = [a for a in res.aggregates if a.scenario == "concurrency_sweep"]
    assert all(a.requests_ok == 5 and a.requests_failed == 0 for a in sweep)
    warm = [r for r in res.requests if r.scenario == "concurrency_sweep" and r.warmup]
    assert len(warm) == 4  # 2 per level, recorded but not aggregated
    # Every request that reached the server is accounted for, warm-ups included.
    assert sum(r.output_tokens or 0 for r in res.requests) == srv.tokens_predicted_total
    ladder = {r.level: r for r in res.requests if r.scenario == "prefill_ladder"}
    assert ladder[128].input_tokens == 128 and not ladder[128].input_tokens_estimated
    assert all(a.prefill_tokens_per_s for a in res.aggregates if a.scenario == "prefill_ladder")
    assert next(a for a in res.aggregates if a.scenario == "decode").decode_tokens_per_s
    # Server metrics: before/during/after, engine samples only, tied to their level.
    phases = {(m.scenario, m.phase) for m in res.server_metrics}
    assert ("concurrency_sweep", "before") in phases and ("concurrency_sweep", "after") in phases
    assert {m.name for m in res.server_metrics} == {
        "llamacpp:tokens_predicted_total",
        "llamacpp:prompt_tokens_total",
        "llamacpp:requests_processing",
    }
    # one progress line per level, and the evaluation set's score after its level
    assert len(lines) == len(res.aggregates) + 1
    assert lines[-1].startswith("quality: ") and lines[-1].endswith(f"of 16 items answered ({set_version()})")


def test_scenario_subset_and_unknown_names() -> None:
    res, _ = suite(TINY, scenarios=["decode", "nope"])
    assert [a.scenario for a in res.aggregates] == ["decode"] and res.smoke_ok is None
    assert any("nope: unknown scenario" in e for e in res.errors)


def test_run_suite_sync_against_a_dead_server_records_failures() -> None:
    profile = TINY.model_copy(update={"scenarios": ["smoke", "decode"], "request_timeout_s": 2})
    res = run_suite_sync("http://127.0.0.1:9", "m", profile, SLO(), "dead")
    assert res.smoke_ok is False
    assert res.requests and all(not r.ok for r in res.requests)
    assert all(a.requests_ok == 0 and a.requests_failed > 0 for a in res.aggregates)


def test_open_loop_rate() -> None:
    async def go() -> SuiteResult:
        async with SyntheticServer(ttft_ms=2, itl_ms=0) as srv:
            prompts = [Prompt(f"p{i}", "x", None, None, 2) for i in range(3)]
            return await run_load(
                srv.base_url, "synthetic", SLO(), "r", DatasetLoad(prompts, requests=40, rate=50.0, seed=3)
            )

    res = asyncio.run(go())
    a = res.aggregates[0]
    assert a.level_kind == "rate" and a.level == 3000 and a.requested_rate == 50.0
    assert a.requests_ok == 40 and a.achieved_rate is not None and 25 < a.achieved_rate < 100
    assert a.queue_p95_ms is not None and a.queue_p95_ms < 250  # behind schedule only by loop lag


def test_cli_bench_writes_the_documented_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "o.json"
    # No configuration file: the built-in quick profile and default SLOs (hermetic whatever strix.toml says).
    monkeypatch.setenv("STRIX_CONFIG", str(tmp_path / "none.toml"))

    async def serve_and_bench() -> int:
        async with SyntheticServer(ttft_ms=2, itl_ms=0) as srv:
            parser = argparse.ArgumentParser()
            parser.add_argument("--config")
            cli_bench.register(parser.add_subparsers())
            args = parser.parse_args(
                [
                    "--config",
                    str(tmp_path / "absent.toml"),
                    "bench",
                    "--url",
                    srv.base_url + "/v1",
                    "--scenario",
                    "smoke,concurrency_sweep",
                    "--concurrency",
                    "1,2",
                    "--requests",
                    "3",
                    "--out",
                    str(out),
                ]
            )
            return await asyncio.to_thread(args.func, args)

    with pytest.raises(
        Exception, match="absent.toml"
    ):  # an explicit --config that does not exist fails loudly
        asyncio.run(serve_and_bench())
    (tmp_path / "absent.toml").unlink(missing_ok=True)

    async def again() -> int:
        async with SyntheticServer(ttft_ms=2, itl_ms=0) as srv:
            parser = argparse.ArgumentParser()
            parser.add_argument("--config")
            cli_bench.register(parser.add_subparsers())
            args = parser.parse_args(
                [
                    "bench",
                    "--url",
                    srv.base_url + "/v1",
                    "--scenario",
                    "smoke,concurrency_sweep",
                    "--concurrency",
                    "1,2",
                    "--requests",
                    "3",
                    "--out",
                    str(out),
                ]
            )
            return await asyncio.to_thread(args.func, args)

    assert asyncio.run(again()) == 0
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 1 and doc["smoke_ok"] is True and doc["model"] == "synthetic"
    levels = doc["scenarios"]["concurrency_sweep"]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        assert lv["requests_ok"] == 3 and lv["requests_failed"] == 0
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert set(lv[key]) >= {"mean", "p50", "p90", "p95", "p99"}
        assert lv["output_tokens_per_s"] > 0 and lv["requests_per_s"] > 0


def test_quick_profile_fits_a_2048_token_slot() -> None:
    from strix_pipeline.loadgen import QUICK_PROFILE
    from strix_pipeline.loadgen.context import CONTEXT_MARGIN
    from strix_pipeline.loadgen.scenarios import ladder_levels

    q = QUICK_PROFILE
    assert ladder_levels(q.prefill_ladder.input_tokens, 2048, q.prefill_ladder.output_tokens)[1] is None
    pc = q.prefix_cache
    assert pc.prefix_tokens + pc.suffix_tokens + pc.output_tokens + CONTEXT_MARGIN <= 2048
    sw = q.concurrency_sweep
    # every level sends at least as many requests as it has clients (level 5: requests_at's 90)
    assert sw.input_tokens + sw.output_tokens + CONTEXT_MARGIN <= 2048 and all(
        c <= sw.requests_for(c) for c in sw.levels
    )


def test_cli_bench_save_loads_the_run_into_a_warehouse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strix_pipeline.warehouse import Warehouse

    monkeypatch.setenv("STRIX_CONFIG", str(tmp_path / "none.toml"))
    db = tmp_path / "w.duckdb"

    async def bench() -> int:
        async with SyntheticServer(ttft_ms=2, itl_ms=0) as srv:
            parser = argparse.ArgumentParser()
            parser.add_argument("--config")
            cli_bench.register(parser.add_subparsers())
            args = parser.parse_args(
                [
                    "bench",
                    "--url",
                    srv.base_url,
                    "--scenario",
                    "decode",
                    "--requests",
                    "2",
                    "--run-id",
                    "bench-t",
                    "--save",
                    "--warehouse",
                    str(db),
                ]
            )
            return await asyncio.to_thread(args.func, args)

    assert asyncio.run(bench()) == 0
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("requests", "bench-t") == 2
        assert wh.count("aggregates", "bench-t") == 1
        assert wh.count("server_metrics", "bench-t") > 0
        assert "bench-t" in wh.run_ids()


def test_a_level_cut_at_its_max_duration_records_its_plan_and_why(tmp_path: Path) -> None:
    profile = TINY.model_copy(
        update={
            "scenarios": ["concurrency_sweep"],
            "concurrency_sweep": TINY.concurrency_sweep.model_copy(
                update={"levels": [1], "requests_per_level": 20, "warmup": 0, "max_duration_s": 0.3}
            ),
        }
    )

    async def go() -> SuiteResult:
        async with SyntheticServer(ttft_ms=60, itl_ms=10) as srv:  # ~110 ms a request, one at a time
            return await run_suite(srv.base_url, "synthetic", profile, SLO(), "cut", scrape_interval_s=0.05)

    res = asyncio.run(go())
    (agg,) = [a for a in res.aggregates if a.scenario == "concurrency_sweep"]
    done = agg.requests_ok + agg.requests_failed
    assert agg.requests_planned == 20 and 1 <= done < 20
    assert agg.stopped_reason == f"stopped at max duration 0.3s after {done}/20 requests"
    assert any(agg.stopped_reason in e for e in res.errors)
    # and the warehouse keeps both
    run = RunRecord(
        "cut",
        "local",
        "synthetic",
        "llamacpp",
        None,
        None,
        None,
        "m",
        "M",
        "Q4_K_M",
        "standard",
        "quick",
        "fp",
        "0.1.0",
        None,
        None,
        None,
        "partial",
        None,
        None,
        res.requests[0].sent_at,
        None,
    )
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.load_run(RunResult(run=run, requests=res.requests, aggregates=res.aggregates))
        got = wh.con.execute(
            "SELECT requests_planned, stopped_reason FROM aggregates WHERE scenario = 'concurrency_sweep'"
        ).fetchall()
    assert got == [(20, agg.stopped_reason)]


def test_inputs_that_overflow_the_context_are_capped_with_a_note() -> None:
    # 96 tokens per request: 64 input + 6 output + the 32-token margin does not fit (nor does the
    # decode's 64 + 12, nor the prefix cache's 256 + 16 + 4); each is capped, once, and says so.
    res, _ = suite(TINY, n_ctx=96, scenarios=["concurrency_sweep", "decode", "prefix_cache"])
    assert "concurrency_sweep: input 64 + 6 more > context 96, capped at 58" in res.errors
    assert "decode: input 64 + 12 more > context 96, capped at 52" in res.errors
    assert "prefix_cache: prefix 256 + 20 more > context 96, capped at 44" in res.errors
    assert len(res.errors) == 3
    sweep = [r for r in res.requests if r.scenario == "concurrency_sweep" and not r.warmup]
    # what the server counted (the chat template's tokens included) still leaves room for the output
    assert sweep and all(r.ok and r.input_tokens is not None and r.input_tokens + 6 <= 96 for r in sweep)
    assert {(a.scenario, a.level) for a in res.aggregates} == {
        ("concurrency_sweep", 1),
        ("concurrency_sweep", 3),
        ("decode", 1),
        ("prefix_cache", 0),
        ("prefix_cache", 1),
    }


def test_the_ladder_replaces_lengths_that_do_not_fit_by_the_cap_unless_a_level_already_measures_it() -> None:
    from strix_pipeline.loadgen.scenarios import ladder_levels

    box = [2048, 4096, 8192, 16384, 32768, 65536]
    # a 16K context: 16384 and longer do not fit; the cap (16348) is twice the longest that fits
    levels, note = ladder_levels(box, 16384, 4)
    assert levels == [2048, 4096, 8192, 16348]
    assert note == "prefill_ladder: 16384, 32768, 65536 > context 16384, capped at 16348"
    # 32K + 1K (the example's Qwen): 32768 fits, the cap 33756 is 3 % above it -- not sent again
    levels, note = ladder_levels(box, 33792, 4)
    assert levels == [2048, 4096, 8192, 16384, 32768]
    assert note == (
        "prefill_ladder: 65536 > context 33792, not sent: the 32768-token level is the longest that fits "
        "(33756)"
    )
    # 48K: the cap is 48 % above 32768, a point of its own
    assert ladder_levels(box, 49152, 4)[0] == [2048, 4096, 8192, 16384, 32768, 49116]
    # 64K + 1K: everything fits, no note
    assert ladder_levels(box, 66560, 4) == (box, None)


def test_the_sweeps_rates_are_open_loop_levels_after_its_clients() -> None:
    """A rate the SLO criterion judges at is measured: requests_per_level requests at that arrival rate,
    stored as the sweep's level of kind "rate" at its requests per minute."""
    profile = TINY.model_copy(
        update={
            "concurrency_sweep": TINY.concurrency_sweep.model_copy(update={"levels": [1], "rates": [20.0]})
        }
    )
    res, _ = suite(profile, scenarios=["concurrency_sweep"])
    assert [(a.level, a.level_kind) for a in res.aggregates] == [(1, "concurrency"), (1200, "rate")]
    (rate,) = [a for a in res.aggregates if a.level_kind == "rate"]
    assert rate.requests_ok == 5 and rate.requested_rate == 20.0
    sent = sorted(r.sent_offset_ms for r in res.requests if r.level_kind == "rate" and not r.warmup)
    assert sent[-1] > 0  # sent on a schedule, not all at once
