"""`strix import FILE`: results of vLLM bench serve, GuideLLM, AIPerf and llama-bench loaded as runs.

The fixtures under tests/fixtures/peers/ were written by the real tools against a real server (each
directory's COMMAND.md has the exact command, the version, the date and what the tool printed). The
imported TTFT p50 and output throughput must equal what the tool printed for that file.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.paths import FIXTURES

from strix_pipeline.fingerprint import COMPARABILITY_FIELDS, differences, run_fingerprint
from strix_pipeline.peers import ImportOptions, PeerFormatError, detect_format, load_peer_file
from strix_pipeline.records import HARNESS_VERSION, LevelAggregate, RunRecord, RunResult
from strix_pipeline.warehouse import Warehouse

PEERS = FIXTURES / "peers"


@dataclass(frozen=True)
class Printed:
    """One fixture and the numbers its tool printed for it (also written in its COMMAND.md)."""

    file: str
    fmt: str
    harness_version: str
    tool_version: str | None  # --tool-version, where the file does not record it
    levels: int
    # (scenario, level) -> (TTFT p50 ms or None, output tok/s), as printed, with the printed decimals
    printed: dict[tuple[str, int], tuple[float | None, float]]
    decimals: int


FIXTURES = [
    Printed(
        "vllm-bench/vllm-bench-serve.json",
        "vllm",
        "vllm-bench 0.32.0",
        "0.32.0",
        1,
        {("random", 2): (767.15, 16.04)},
        2,
    ),
    Printed(
        "guidellm/benchmarks.json", "guidellm", "guidellm 0.8.1", None, 1, {("random", 2): (1279.0, 9.5)}, 1
    ),
    Printed(
        "aiperf/profile_export_aiperf.json",
        "aiperf",
        "aiperf 0.13.0",
        None,
        1,
        {("random", 2): (646.17, 17.66)},
        2,
    ),
    Printed(
        "llama-bench/llama-bench.json",
        "llama-bench",
        "llama-bench 11434.0.0",
        "11434.0.0",
        4,
        {("tg16", 0): (None, 23.75), ("tg16", 256): (None, 27.36)},
        2,
    ),
    Printed(
        "llama-bench/llama-bench.jsonl",
        "llama-bench",
        "llama-bench 11434.0.0",
        "11434.0.0",
        4,
        {("tg16", 0): (None, 28.04), ("tg16", 256): (None, 27.57)},
        2,
    ),
]
IDS = [f.file for f in FIXTURES]


def strix(*argv: str) -> int:
    from strix_pipeline.cli import main

    return main(list(argv))


def import_argv(fx: Printed, warehouse: Path, *extra: str) -> list[str]:
    argv = ["import", str(PEERS / fx.file), "--warehouse", str(warehouse), *extra]
    return argv + (["--tool-version", fx.tool_version] if fx.tool_version else [])


def strix_run(run_id: str = "strix-bench-1") -> RunResult:
    """A run as `strix bench --save` records the same vLLM command line against the same server."""
    run = RunRecord(
        run_id=run_id,
        host="adhoc",
        engine="llamacpp",
        engine_kind="llamacpp",
        image_repository=None,
        image_tag=None,
        image_digest=None,
        model_profile="adhoc",
        model="gemma3-270m",
        quantization="unknown",
        suite="standard",
        profile="quick",
        fingerprint="",
        harness_version=HARNESS_VERSION,
        engine_build=None,
        launch_command="strix bench --url http://127.0.0.1:8080",
        engine_flags=None,
        status="ok",
        failure_reason=None,
        log_tail=None,
        started_at=datetime(2026, 12, 1, 8, 30, tzinfo=UTC),
        ended_at=datetime(2026, 12, 1, 8, 31, tzinfo=UTC),
    )
    run.fingerprint = run_fingerprint(run)
    agg = LevelAggregate(
        run_id=run_id,
        scenario="random",
        level=2,
        level_kind="concurrency",
        requests_ok=8,
        requests_failed=0,
        duration_s=10.0,
        ttft_p50_ms=800.0,
        ttft_p95_ms=950.0,
        output_tokens_per_s=15.0,
        requests_per_s=0.9,
    )
    return RunResult(run=run, aggregates=[agg])


def counts(path: Path) -> dict[str, int]:
    with Warehouse.open(path, read_only=True) as wh:
        return {t: wh.count(t) for t in ("runs", "aggregates", "requests")}


def test_every_fixture_has_its_command_and_printed_numbers_written_down() -> None:
    for fx in FIXTURES:
        doc = (PEERS / fx.file).parent / "COMMAND.md"
        text = doc.read_text()
        assert "```sh" in text and "Date:" in text and "Tool:" in text, doc
        for ttft, out in fx.printed.values():
            assert f"{out:.{fx.decimals}f}" in text, (doc, out)
            if ttft is not None:
                assert f"{ttft:.{fx.decimals}f}" in text, (doc, ttft)


@pytest.mark.parametrize("fx", FIXTURES, ids=IDS)
def test_the_format_is_told_from_the_file(fx: Printed) -> None:
    assert detect_format(PEERS / fx.file) == fx.fmt


@pytest.mark.parametrize("fx", FIXTURES, ids=IDS)
def test_a_real_file_loads_as_a_run_with_the_numbers_the_tool_printed(
    fx: Printed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tmp_path / "w.duckdb"
    assert strix(*import_argv(fx, w)) == 0
    assert fx.harness_version in capsys.readouterr().out
    with Warehouse.open(w, read_only=True) as wh:
        runs = wh.query_df(
            "SELECT run_id, harness_version, suite, profile, status, fingerprint FROM runs"
        ).to_dicts()
        assert len(runs) == 1
        run = runs[0]
        assert run["harness_version"] == fx.harness_version  # the tool and its version
        assert run["suite"] == fx.harness_version.split(" ")[0] and run["profile"] == "import"
        assert run["status"] == "ok"
        aggs = wh.query_df(
            "SELECT scenario, level, ttft_p50_ms, output_tokens_per_s FROM aggregates WHERE run_id = ?",
            [run["run_id"]],
        ).to_dicts()
    assert len(aggs) == fx.levels
    got = {(a["scenario"], a["level"]): a for a in aggs}
    for key, (ttft, out) in fx.printed.items():
        a = got[key]
        assert round(a["output_tokens_per_s"], fx.decimals) == out
        if ttft is None:
            assert a["ttft_p50_ms"] is None  # llama-bench measures no TTFT
        else:
            assert round(a["ttft_p50_ms"], fx.decimals) == ttft


def test_llama_bench_pp_rows_are_prefill_rates_per_depth() -> None:
    r = load_peer_file(PEERS / "llama-bench/llama-bench.json", opts=ImportOptions(tool_version="11434.0.0"))
    pp = {(a.scenario, a.level, a.level_kind): a for a in r.aggregates if a.scenario == "pp64"}
    assert round(pp[("pp64", 0, "depth")].prefill_tokens_per_s or 0, 2) == 139.75
    assert round(pp[("pp64", 256, "depth")].prefill_tokens_per_s or 0, 2) == 251.13
    assert r.run.engine_kind == "llamacpp" and r.run.quantization == "Q4_K_M"
    assert r.run.model == "gemma-3-270m-q4_k_m.gguf"
    flags = json.loads(r.run.engine_flags or "[]")
    assert flags[:2] == ["-t", "1"] and "-fa" in flags  # what shapes llama-bench's numbers is comparability


def test_reimporting_a_file_replaces_its_run(tmp_path: Path) -> None:
    w = tmp_path / "w.duckdb"
    fx = FIXTURES[0]
    assert strix(*import_argv(fx, w)) == 0
    assert strix(*import_argv(fx, w)) == 0
    assert counts(w)["runs"] == 1


# ---- refusals: the field named, nothing loaded ----------------------------------------------------


def _json_copy(src: str, dst: Path, mutate: Callable[[Any], None]) -> Path:
    doc = json.loads((PEERS / src).read_text())
    mutate(doc)
    dst.write_text(json.dumps(doc))
    return dst


def _guidellm_ttft(doc: dict) -> None:
    doc["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["median"] = "fast"


def _aiperf_unit(doc: dict) -> None:
    doc["output_token_throughput"]["unit"] = "tokens/min"


def _llama_null(doc: list) -> None:
    doc[1]["avg_ts"] = None


def _vllm_ttft(doc: dict) -> None:
    doc["median_ttft_ms"] = "fast"


def _guidellm_strategy(doc: dict) -> None:
    doc["benchmarks"][0]["config"]["strategy"]["type_"] = "trace"


def _aiperf_no_version(doc: dict) -> None:
    doc["aiperf_version"] = "0.9.0"


def _guidellm_no_benchmarks(doc: dict) -> None:
    del doc["benchmarks"][0]["metrics"]["output_tokens_per_second"]["total"]


MALFORMED = [
    ("vllm-bench/vllm-bench-serve.json", _vllm_ttft, ["--tool-version", "0.32.0"], "$.median_ttft_ms"),
    (
        "guidellm/benchmarks.json",
        _guidellm_ttft,
        [],
        "$.benchmarks[0].metrics.time_to_first_token_ms.successful.median",
    ),
    ("guidellm/benchmarks.json", _guidellm_strategy, [], "$.benchmarks[0].config.strategy.type_"),
    (
        "guidellm/benchmarks.json",
        _guidellm_no_benchmarks,
        [],
        "$.benchmarks[0].metrics.output_tokens_per_second.total",
    ),
    ("aiperf/profile_export_aiperf.json", _aiperf_unit, [], "$.output_token_throughput.unit"),
    ("aiperf/profile_export_aiperf.json", _aiperf_no_version, [], "$.aiperf_version"),
    ("llama-bench/llama-bench.json", _llama_null, ["--tool-version", "11434.0.0"], "$[1].avg_ts"),
]


@pytest.mark.parametrize(("src", "mutate", "extra", "field"), MALFORMED, ids=[m[3] for m in MALFORMED])
def test_a_malformed_copy_is_refused_naming_the_field_and_loads_nothing(
    src: str,
    mutate: Callable[[Any], None],
    extra: list[str],
    field: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    w = tmp_path / "w.duckdb"
    with Warehouse.open(w) as wh:
        wh.load_run(strix_run())
    before = counts(w)
    bad = _json_copy(src, tmp_path / Path(src).name, mutate)
    assert strix("import", str(bad), "--warehouse", str(w), *extra) == 1
    err = capsys.readouterr().err
    assert f": {field}: " in err and "nothing was loaded" in err, err
    assert counts(w) == before


def test_a_truncated_jsonl_line_is_refused_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tmp_path / "w.duckdb"
    lines = (PEERS / "llama-bench/llama-bench.jsonl").read_text().splitlines()
    bad = tmp_path / "cut.jsonl"
    bad.write_text("\n".join([*lines[:2], lines[2][:40], lines[3]]) + "\n")
    rc = strix("import", str(bad), "--format", "llama-bench", "--tool-version", "1", "--warehouse", str(w))
    assert rc == 1
    assert ": line 3: not JSON" in capsys.readouterr().err
    assert not w.exists()  # refused before the warehouse is even opened


def test_a_jsonl_file_of_two_builds_is_refused(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (PEERS / "llama-bench/llama-bench.jsonl").read_text().splitlines()]
    rows[3] = {**rows[3], "n_threads": 2}
    bad = tmp_path / "mixed.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(PeerFormatError) as e:
        load_peer_file(bad, opts=ImportOptions(tool_version="1"))
    assert e.value.field == "line 4.n_threads"


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        ('{"foo": 1, "bar": [2]}', "$", "not a file of a known tool"),
        ("[1, 2, 3]", "$", "not a file of a known tool"),
        ("Serving Benchmark Result\n", "$", "not JSON"),
    ],
)
def test_an_unknown_file_is_refused(
    text: str, field: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tmp_path / "w.duckdb"
    f = tmp_path / "x.json"
    f.write_text(text)
    assert strix("import", str(f), "--warehouse", str(w)) == 1
    err = capsys.readouterr().err
    assert f"x.json: {field}: " in err and says in err, err
    assert not w.exists() or counts(w)["runs"] == 0


def test_a_file_without_the_tools_version_is_refused_until_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tmp_path / "w.duckdb"
    for src in ("vllm-bench/vllm-bench-serve.json", "llama-bench/llama-bench.json"):
        assert strix("import", str(PEERS / src), "--warehouse", str(w)) == 1
        assert "--tool-version" in capsys.readouterr().err
    assert not w.exists() or counts(w)["runs"] == 0


def test_import_takes_a_file_or_a_parquet_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tmp_path / "w.duckdb"
    assert strix("import", "--warehouse", str(w)) == 1
    assert (
        strix("import", str(PEERS / FIXTURES[1].file), "--parquet", str(tmp_path), "--warehouse", str(w)) == 1
    )
    assert "not both" in capsys.readouterr().err


def test_a_wrong_format_is_refused_naming_a_field_it_lacks() -> None:
    with pytest.raises(PeerFormatError) as e:
        load_peer_file(PEERS / "aiperf/profile_export_aiperf.json", "vllm", ImportOptions(tool_version="1"))
    assert e.value.field == "$.completed"


# ---- series and v_compare -------------------------------------------------------------------------


def _peer(fx: Printed, **opts: str) -> RunResult:
    return load_peer_file(PEERS / fx.file, fx.fmt, ImportOptions(tool_version=fx.tool_version, **opts))


@pytest.mark.parametrize("fx", FIXTURES, ids=IDS)
def test_a_peer_run_never_shares_a_series_with_a_strix_run(fx: Printed) -> None:
    peer = _peer(fx).run
    # a strix run that matches the peer in every comparability field but the harness
    twin = copy.copy(strix_run().run)
    for name in COMPARABILITY_FIELDS:
        if name != "harness_version":
            setattr(twin, name, getattr(peer, name))
    assert run_fingerprint(twin) != peer.fingerprint
    assert set(differences(twin, peer)) == {"harness_version"}
    assert differences(twin, peer)["harness_version"] == (HARNESS_VERSION, fx.harness_version)


def test_two_peer_runs_of_one_tool_and_configuration_share_their_series() -> None:
    a, b = (_peer(fx).run for fx in FIXTURES if fx.fmt == "llama-bench")
    assert a.run_id != b.run_id and a.fingerprint == b.fingerprint


def test_v_compare_sets_a_peer_run_beside_a_strix_run(tmp_path: Path) -> None:
    w = tmp_path / "w.duckdb"
    strix_result = strix_run()
    peers = [_peer(fx, engine="llamacpp") for fx in FIXTURES if fx.fmt in ("vllm", "guidellm", "aiperf")]
    with Warehouse.open(w) as wh:
        wh.load_run(strix_result)
        for p in peers:
            wh.load_run(p)
        rows = wh.query_df(
            "SELECT b_run_id, metric, a_value, b_value, same_series, ratio FROM v_compare "
            "WHERE a_run_id = ? AND scenario = 'random' AND level = 2 AND level_kind = 'concurrency' "
            "AND metric IN ('ttft_p50_ms', 'output_tokens_per_s') ORDER BY b_run_id, metric",
            [strix_result.run.run_id],
        ).to_dicts()
    by = {(r["b_run_id"], r["metric"]): r for r in rows}
    assert len(by) == 2 * len(peers)
    for p in peers:
        agg = p.aggregates[0]
        ttft = by[(p.run.run_id, "ttft_p50_ms")]
        out = by[(p.run.run_id, "output_tokens_per_s")]
        assert ttft["a_value"] == 800.0 and ttft["b_value"] == agg.ttft_p50_ms
        assert out["a_value"] == 15.0 and out["b_value"] == agg.output_tokens_per_s
        assert ttft["same_series"] is False and out["same_series"] is False


def test_a_tool_version_that_contradicts_the_file_is_refused() -> None:
    with pytest.raises(PeerFormatError) as e:
        load_peer_file(PEERS / "guidellm/benchmarks.json", opts=ImportOptions(tool_version="0.9.0"))
    assert e.value.field == "$.metadata.guidellm_version"
    assert load_peer_file(
        PEERS / "aiperf/profile_export_aiperf.json", opts=ImportOptions(tool_version="0.13.0")
    )
