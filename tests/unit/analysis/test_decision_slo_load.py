"""C6's load: ``[decision.slo] load`` is a number of clients (a sweep level), an arrival rate in
requests/s (the sweep's open-loop level at it) or "trace" (the decision's trace as it replays). A load
no run of the decision measures, or one written in no known form, is refused at load time naming the
field; the criterion judges the requests at that load and its reason says which load it was."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from pydantic import ValidationError
from support.decision_seed import SEPT, evidence_of, make_config, run_record, seeded, sweep_requests

from strix_pipeline.analysis.decision import evaluate
from strix_pipeline.analysis.decision.criteria import goodput_within_slos
from strix_pipeline.config import SLO, SloLoad, StrixConfig, rate_level
from strix_pipeline.loadgen.metrics import aggregate_level
from strix_pipeline.records import RunResult

NOW = SEPT + timedelta(days=1)
N = 200


def with_runs(profiles: dict, **slo: object) -> StrixConfig:
    """The decision's config with both engines run on its host under ``profiles`` (name -> table)."""
    data = make_config().model_dump()
    data["profiles"] = profiles
    names = list(profiles)
    data["runs"] = {
        "strix-halo": [
            {"engine": "vllm", "model": "qwen3-30b-a3b", "profile": names[0]},
            {"engine": "llamacpp", "model": "qwen3-30b-a3b", "profile": names[-1]},
        ]
    }
    data["decision"]["slo"] = {"ttft_ms": 1000, **slo}
    return StrixConfig.model_validate(data)


def test_the_load_is_clients_a_rate_or_the_trace() -> None:
    assert make_config().decision.slo_load == SloLoad("concurrency", clients=5)
    eight = make_config(slo={"ttft_ms": 1000, "load": 8}).decision
    assert eight.slo_load == SloLoad("concurrency", clients=8) and eight.slo_concurrency == 8
    assert make_config(slo={"ttft_ms": 1000, "concurrency": 3}).decision.slo_load.clients == 3
    rate = make_config(slo={"ttft_ms": 1000, "load": "2.5/s"}).decision
    assert rate.slo_load == SloLoad("rate", rate=2.5) and rate.slo_load.level == rate_level(2.5) == 150
    assert rate.slo_concurrency == 5  # a rate has no clients of its own: C3's level stays the decision's
    assert make_config(slo={"ttft_ms": 1000, "load": "trace"}).decision.slo_load == SloLoad("trace")


@pytest.mark.parametrize("load", ["fast", "2.5 rps", 2.5, "-1/s", "0/s", 0, True])
def test_a_load_in_no_known_form_is_refused_naming_the_field(load: object) -> None:
    with pytest.raises(ValidationError) as e:
        make_config(slo={"ttft_ms": 1000, "load": load})
    said = str(e.value)
    assert "decision.slo.load" in said, said
    assert "2.5/s" in said or "at least 1 client" in said, said


def test_clients_given_twice_are_refused() -> None:
    with pytest.raises(ValidationError, match="concurrency and load both name the load"):
        make_config(slo={"ttft_ms": 1000, "load": 8, "concurrency": 4})


def test_a_rate_the_decisions_profiles_do_not_send_is_refused_naming_both_fields() -> None:
    sends = {"concurrency_sweep": {"rates": [1.0, 2.5]}}
    assert with_runs({"p": sends}, load="2.5/s").decision.slo_load.rate == 2.5
    with pytest.raises(ValidationError) as e:
        with_runs({"p": sends, "q": {}}, load="2.5/s")
    said = str(e.value)
    assert "decision.slo.load: 2.5 requests/s is not sent by profile(s) q of host strix-halo" in said
    assert "concurrency_sweep.rates" in said


def test_trace_needs_the_decisions_profiles_to_replay_one() -> None:
    trace = {"trace": {"name": "prod-week"}}
    assert with_runs({"p": trace}, load="trace").decision.slo_load.kind == "trace"
    with pytest.raises(ValidationError) as e:
        with_runs({"p": trace, "q": {}}, load="trace")
    said = str(e.value)
    assert 'decision.slo.load: "trace"' in said and "profile(s) q of host strix-halo replay none" in said


def at_load(
    run_id: str, engine: str, ttfts: list[float], scenario: str, level: int, kind: str, spacing_s: float
) -> RunResult:
    """A level of these TTFTs (E2E = TTFT + 5 s) stored as ``scenario`` at ``level`` of ``kind``, its
    requests sent ``spacing_s`` apart (the level's wall time follows)."""
    tag = "v0.11.0" if engine == "vllm" else "server-rocm-b6500"
    run = run_record(run_id, engine, tag=tag, started_at=SEPT - timedelta(hours=engine == "llamacpp"))
    requests = sweep_requests(run_id, run.started_at, ttfts, level=level)
    for i, q in enumerate(requests):
        q.scenario, q.level_kind = scenario, kind
        q.sent_offset_ms = 1000.0 * spacing_s * i
        q.sent_at = run.started_at + timedelta(seconds=spacing_s * i)
    agg = aggregate_level(
        requests,
        run_id=run_id,
        scenario=scenario,
        level=level,
        level_kind=kind,
        slo=SLO(),
        requested_rate=None,
    )
    return RunResult(run=run, requests=requests, aggregates=[agg])


def lognormal(seed: int, median: float) -> list[float]:
    return np.random.default_rng(seed).lognormal(np.log(median), 0.2, N).tolist()


def c6(runs: list[RunResult], load: object):
    config = make_config(candidate_model="qwen3-30b-a3b", slo={"ttft_ms": 1000, "load": load})
    return goodput_within_slos(evidence_of(runs, config, NOW), config)


def test_at_a_rate_c6_judges_the_open_loop_level_and_says_so() -> None:
    level = rate_level(2.5)
    runs = [
        at_load("cand", "vllm", lognormal(1, 700), "concurrency_sweep", level, "rate", 0.4),
        at_load("base", "llamacpp", lognormal(2, 1100), "concurrency_sweep", level, "rate", 0.4),
    ]
    c = c6(runs, "2.5/s")
    assert c.status == "pass" and c.ci_low > 1, c.reason
    assert "SLOs TTFT <= 1000 ms at 2.5 requests/s (open loop)" in c.reason
    assert "the level's wall time" in c.reason and "clients x" not in c.reason
    # goodput per wall-clock second: the requests within the SLOs over the level's wall time
    wall = runs[0].aggregates[0].duration_s
    met = sum(t <= 1000 for t in lognormal(1, 700))
    assert f"goodput {met / wall:.2f} req/s" in c.reason, c.reason
    # the closed-loop level of the same number is not this load
    closed = [
        at_load("cand", "vllm", lognormal(1, 700), "concurrency_sweep", level, "concurrency", 0.4),
        at_load("base", "llamacpp", lognormal(2, 1100), "concurrency_sweep", level, "concurrency", 0.4),
    ]
    unknown = c6(closed, "2.5/s")
    assert unknown.status == "unknown" and "requests at 2.5 requests/s (open loop)" in unknown.reason


def test_at_the_trace_c6_judges_its_replay_as_it_ran() -> None:
    by_clients = [
        at_load("cand", "vllm", lognormal(3, 700), "trace", 3, "concurrency", 1.0),
        at_load("base", "llamacpp", lognormal(4, 1100), "trace", 3, "concurrency", 1.0),
    ]
    c = c6(by_clients, "trace")
    assert c.status == "pass", c.reason
    assert "at the trace's replay at 3 clients" in c.reason and "3 clients x requests" in c.reason
    arrivals = [
        at_load("cand", "vllm", lognormal(3, 700), "trace", 42, "rate", 1.5),
        at_load("base", "llamacpp", lognormal(4, 1100), "trace", 42, "rate", 1.5),
    ]
    c = c6(arrivals, "trace")
    assert c.status == "pass" and "at the trace's recorded arrivals (open loop)" in c.reason, c.reason
    # a sweep level is not the trace's load
    sweep = [
        at_load("cand", "vllm", lognormal(3, 700), "concurrency_sweep", 5, "concurrency", 1.0),
        at_load("base", "llamacpp", lognormal(4, 1100), "concurrency_sweep", 5, "concurrency", 1.0),
    ]
    assert c6(sweep, "trace").status == "unknown"


def test_the_warehouse_gives_c6_the_requests_at_the_configured_load(tmp_path) -> None:
    """Gathered from a real DuckDB warehouse, C6 reads the rate level's requests -- not the closed-loop
    level stored beside it -- and judges as on the records."""
    level = rate_level(2.5)
    runs = [
        at_load("cand", "vllm", lognormal(1, 700), "concurrency_sweep", level, "rate", 0.4),
        at_load("base", "llamacpp", lognormal(2, 1100), "concurrency_sweep", level, "rate", 0.4),
    ]
    # the same run's closed-loop level at 5 clients, where the candidate is far slower
    for r, median in zip(runs, (5000, 1100), strict=True):
        slow = at_load(
            r.run.run_id, r.run.engine, lognormal(9, median), "concurrency_sweep", 5, "concurrency", 1
        )
        r.requests.extend(slow.requests)
        r.aggregates.extend(slow.aggregates)
    wh = seeded(tmp_path / "w.duckdb", runs)
    config = make_config(candidate_model="qwen3-30b-a3b", slo={"ttft_ms": 1000, "load": "2.5/s"})
    d = evaluate(wh, config, now=NOW)
    (c,) = [c for c in d.criteria if c.criterion == "C6"]
    assert c.status == "pass" and "at 2.5 requests/s (open loop)" in c.reason, c.reason
    assert c.reason == goodput_within_slos(evidence_of(runs, config, NOW), config).reason
