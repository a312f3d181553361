"""A trace's summary figures, the profile key that replays it, its prompts (shared blocks are the same
text), and `strix workload import` storing it in the warehouse and the artifacts folder."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import ValidationError
from support.paths import REPO

from strix_pipeline import cli
from strix_pipeline.config import DEFAULT_CONFIG, ScenarioProfile
from strix_pipeline.config_load import load_config
from strix_pipeline.fingerprint import workload_digest
from strix_pipeline.loadgen.trace_replay import TracePrompts, fit
from strix_pipeline.loadgen.workloads import Workload
from strix_pipeline.runner.record import new_record
from strix_pipeline.runner.target import BenchmarkTarget
from strix_pipeline.traces.formats import read_trace
from strix_pipeline.traces.model import Trace, TraceRequest
from strix_pipeline.traces.store import load_trace, save_trace, stored_digest
from strix_pipeline.traces.summary import concurrency, prefix_reuse, summarise
from strix_pipeline.warehouse import Warehouse

FIXTURES = REPO / "tests" / "fixtures" / "traces"


def trace(*reqs: TraceRequest) -> Trace:
    return Trace("mooncake", "sha256:x", reqs)


def test_concurrency_from_arrivals_and_serving_times() -> None:
    # [0, 2) [1, 3) [1.5, 2.5) [4, 5): three in flight at 1.5 s; 1 + 2 + 1 + 1 = 5 s busy over 5 s
    t = trace(
        TraceRequest(0.0, 10, 1, (), 2.0),
        TraceRequest(1.0, 10, 1, (), 2.0),
        TraceRequest(1.5, 10, 1, (), 1.0),
        TraceRequest(4.0, 10, 1, (), 1.0),
    )
    assert concurrency(t) == (pytest.approx(6.0 / 5.0), 3)
    assert concurrency(trace(TraceRequest(0.0, 10, 1), TraceRequest(1.0, 10, 1))) == (None, None)


def test_prefix_reuse_counts_the_tokens_of_blocks_sent_before() -> None:
    # the second request reuses block 0 (512 tokens) of its 700; the third reuses 0 and 1's 188
    t = trace(
        TraceRequest(0, 700, 1, (0, 1)), TraceRequest(1, 700, 1, (0, 2)), TraceRequest(2, 700, 1, (0, 1))
    )
    assert prefix_reuse(t) == pytest.approx((512 + 700) / 2100)


def test_summary_percentiles_and_rate() -> None:
    s = summarise(trace(*(TraceRequest(float(k), 100 * (k + 1), k + 1) for k in range(10))))
    assert (s.input_p50, s.input_p90, s.input_max) == (500, 900, 1000)
    assert s.rate_per_s == pytest.approx(1.0)
    assert s.span_s == 9.0


def test_a_profile_names_its_trace_and_runs_it_after_the_others() -> None:
    p = ScenarioProfile.model_validate({"trace": {"name": "box-week", "replay": "concurrency"}})
    assert p.scenarios[-1] == "trace"
    assert p.trace is not None and p.trace.time_scale == 1.0
    with pytest.raises(ValidationError, match="trace.name"):
        ScenarioProfile.model_validate({"scenarios": ["smoke", "trace"]})
    with pytest.raises(ValidationError):
        ScenarioProfile.model_validate({"trace": {"name": "../etc"}})


def test_the_weekly_and_decision_profiles_take_a_trace(tmp_path: Path) -> None:
    text = DEFAULT_CONFIG.read_text()
    text = text.replace("[profiles.standard]\n", '[profiles.standard]\ntrace = { name = "box-week" }\n')
    text = text.replace(
        '[profiles.decision]\nscenarios = ["smoke", "concurrency_sweep", "quality"]',
        '[profiles.decision]\nscenarios = ["smoke", "concurrency_sweep", "trace", "quality"]\n'
        'trace = { name = "box-week", replay = "arrivals", time_scale = 0.5 }',
    )
    (tmp_path / "strix.toml").write_text(text)
    config = load_config(tmp_path / "strix.toml")
    assert config.profiles["standard"].trace is not None
    assert config.profiles["decision"].scenarios == ["smoke", "concurrency_sweep", "trace", "quality"]


def test_shared_blocks_are_identical_text_and_the_rest_differs() -> None:
    wl = Workload(None, seed=3)
    asyncio.run(wl.prepare(2048))
    build = TracePrompts(wl, 512, seed=3)

    async def prompts() -> list[str]:
        reqs = [TraceRequest(0, 700, 4, (0, 1)), TraceRequest(1, 700, 4, (0, 2)), TraceRequest(2, 300, 4)]
        return [(await build.prompt(r, r.input_tokens, 4)).text for r in reqs]

    a, b, c = asyncio.run(prompts())
    block = int(512 * wl.chars_per_token)
    assert a[:block] == b[:block]  # block 0 shared
    assert a[block : block + 50] != b[block : block + 50]  # blocks 1 and 2 differ
    assert a[:50] != c[:50]
    assert abs(len(a) / wl.chars_per_token - 700) < 5


def test_a_request_too_long_for_the_context_is_shortened_input_first() -> None:
    assert fit(TraceRequest(0, 3000, 100), 2048) == (2048 - 100 - 32, 100)
    assert fit(TraceRequest(0, 100, 4), 2048) == (100, 4)
    assert fit(TraceRequest(0, 100, 4000), 2048) == (16, 2048 - 16 - 32)


def test_workload_import_stores_the_trace_and_its_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    text = DEFAULT_CONFIG.read_text()
    text = text.replace('artifacts = "artifacts"', f'artifacts = "{tmp_path / "art"}"')
    text = text.replace('warehouse = "warehouse/strix.duckdb"', f'warehouse = "{tmp_path / "w.duckdb"}"')
    cfg = tmp_path / "strix.toml"
    cfg.write_text(text)
    rc = cli.main(
        ["--config", str(cfg), "workload", "import", str(FIXTURES / "mooncake.jsonl"), "--name", "moon"]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "trace moon" in out and "prefix reuse" in out
    with Warehouse.open(tmp_path / "w.duckdb", read_only=True) as w:
        [row] = w.list_traces()
    assert (row.name, row.format, row.requests, row.source_file) == ("moon", "mooncake", 30, "mooncake.jsonl")
    assert row.rate_per_s is not None and row.concurrency_mean is None
    back, digest = load_trace(tmp_path / "art" / "traces", "moon")
    assert digest == row.content_digest and len(back.requests) == 30


def test_workload_import_refuses_a_bad_file_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 0}\n')
    rc = cli.main(
        ["--config", str(DEFAULT_CONFIG), "workload", "import", str(bad), "--warehouse", str(tmp_path / "w")]
    )
    assert rc == 1
    assert f"{bad}:1: field 'output_length'" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_a_run_of_a_trace_profile_is_in_the_series_of_the_trace_as_stored(tmp_path: Path) -> None:
    text = DEFAULT_CONFIG.read_text()
    text = text.replace('artifacts = "artifacts"', f'artifacts = "{tmp_path / "art"}"')
    text = text.replace("[profiles.standard]\n", '[profiles.standard]\ntrace = { name = "moon" }\n')
    (tmp_path / "strix.toml").write_text(text)
    config = load_config(tmp_path / "strix.toml")
    target = BenchmarkTarget("local", "llamacpp", "gemma3-270m", "standard", None)
    folder = config.traces_dir()

    def workload() -> str | None:
        return new_record(config, target, "r", None).workload

    never_imported = workload()
    save_trace(folder, "moon", read_trace(FIXTURES / "mooncake.jsonl"))
    first = workload()
    save_trace(folder, "moon", read_trace(FIXTURES / "replay.jsonl"))  # imported again, other requests
    assert len({never_imported, first, workload()}) == 3
    assert workload() == workload_digest(config.profiles["standard"], stored_digest(folder, "moon"))
    assert never_imported == workload_digest(config.profiles["standard"])


def test_a_profile_without_a_trace_keeps_the_workload_digest_it_had() -> None:
    # the digest of the default (standard) profile before profiles could name a trace: its series go on
    assert workload_digest(ScenarioProfile()) == "wl-a1726ed07047"
    with_trace = ScenarioProfile.model_validate({"trace": {"name": "moon"}})
    assert workload_digest(with_trace) != workload_digest(ScenarioProfile())


def test_workload_import_refuses_a_name_that_is_no_plain_name(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args = [
        "--config",
        str(DEFAULT_CONFIG),
        "workload",
        "import",
        str(FIXTURES / "azure.csv"),
        "--name",
        "../up",
    ]
    assert cli.main(args) == 1
    assert "--name '../up'" in capsys.readouterr().err
