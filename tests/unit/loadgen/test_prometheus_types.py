"""Prometheus as it is: every engine sample keeps its family's `# TYPE` and `# HELP`,
stored beside the sample (schema v4), so a counter is read as a running total and never as a level.

The exposition texts are in the shapes the engines really write: vLLM's comes from prometheus_client
(text format 0.0.4: a counter's TYPE line names its `_total` sample, its `_created` twin is a gauge of
its own, histograms give `_bucket` per `le`, `_count` and `_sum`), llama-server's is hand-written C++
(counters and gauges, no histograms). The real llama-server's `/metrics` is read in
tests/integration/llama/test_prometheus_llama.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.prometheus import parse_prometheus, sample_value
from support.warehouse import create_at_version, make_run

from strix_pipeline.loadgen.prometheus import (
    UNTYPED,
    Scrape,
    parse_exposition,
    to_samples,
)
from strix_pipeline.records import RunRecord, ServerMetricSample, column_names
from strix_pipeline.warehouse import Warehouse, current_schema_version

T0 = datetime(2026, 9, 1, 3, 0, tzinfo=UTC)

VLLM = (
    r"""# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="gemma3-270m"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="gemma3-270m"} 0.0375
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="gemma3-270m"} 1536.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="gemma3-270m"} 1.7568e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="gemma3-270m"} 96.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="gemma3-270m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="gemma3-270m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="gemma3-270m"} 11.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="gemma3-270m"} 12.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="gemma3-270m"} 12.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="gemma3-270m"} 1.873
# HELP vllm:request_success_total Count of successfully processed requests.\nBy finish reason; """
    r"""a \\ is a backslash.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="gemma3-270m"} 12.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="gemma3-270m"} 0.0
vllm:cache_config_info{block_size="16",engine="0"} 1.0
"""
)

# llama-server's own exposition (tools/server/server.cpp): a HELP and a TYPE line per metric.
LLAMA = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 640
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 48
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 812.5
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
"""


def by_name(text: str) -> dict[tuple[str, str], object]:
    return {(s.name, json.dumps(s.labels, sort_keys=True)): s for s in parse_exposition(text)}


def test_each_sample_carries_its_family_type_and_help() -> None:
    samples = parse_exposition(VLLM)
    kinds = {s.name: (s.family, s.type) for s in samples}
    assert kinds["vllm:num_requests_running"] == ("vllm:num_requests_running", "gauge")
    assert kinds["vllm:prompt_tokens_total"] == ("vllm:prompt_tokens_total", "counter")
    # prometheus_client's `_created` twin is a gauge of its own, not part of the counter
    assert kinds["vllm:prompt_tokens_created"] == ("vllm:prompt_tokens_created", "gauge")
    # a histogram's three sample kinds belong to the family its TYPE line names
    fam = "vllm:time_to_first_token_seconds"
    for suffix in ("_bucket", "_count", "_sum"):
        assert kinds[fam + suffix] == (fam, "histogram"), suffix
    # no TYPE (and no HELP) line: untyped, as Prometheus treats it, and its own family
    assert kinds["vllm:cache_config_info"] == ("vllm:cache_config_info", UNTYPED)
    info = next(s for s in samples if s.name == "vllm:cache_config_info")
    assert info.help is None and info.labels == {"block_size": "16", "engine": "0"}

    helps = {s.name: s.help for s in samples}
    assert helps["vllm:prompt_tokens_total"] == "Number of prefill tokens processed."
    assert helps[fam + "_bucket"] == "Histogram of time to first token in seconds."
    # HELP escapes \n and \\ (and nothing else)
    assert helps["vllm:request_success_total"] == (
        "Count of successfully processed requests.\nBy finish reason; a \\ is a backslash."
    )
    # other families are still skipped, their TYPE lines notwithstanding
    assert not any(s.name.startswith("python_") for s in samples)
    assert len([s for s in samples if s.name == fam + "_bucket"]) == 4
    assert next(s for s in samples if s.name == fam + "_sum").value == pytest.approx(1.873)


def test_llama_server_exposition_is_counters_and_gauges() -> None:
    s = by_name(LLAMA)
    assert {k[0]: v.type for k, v in s.items()} == {
        "llamacpp:prompt_tokens_total": "counter",
        "llamacpp:tokens_predicted_total": "counter",
        "llamacpp:prompt_tokens_seconds": "gauge",
        "llamacpp:requests_processing": "gauge",
    }
    assert s[("llamacpp:prompt_tokens_seconds", "{}")].help == "Average prompt throughput in tokens/s."


def test_openmetrics_family_names_and_unknown_type() -> None:
    # OpenMetrics names the family without the suffix and spells untyped "unknown"
    text = (
        "# TYPE vllm:num_preemptions counter\n"
        "# HELP vllm:num_preemptions Cumulative number of preemptions.\n"
        'vllm:num_preemptions_total{engine="0"} 3\n'
        'vllm:num_preemptions_created{engine="0"} 1.7e9\n'
        "# TYPE vllm:e2e_latency summary\n"
        'vllm:e2e_latency{quantile="0.5"} 0.25\n'
        "vllm:e2e_latency_sum 4.5\n"
        "vllm:e2e_latency_count 18\n"
        "# TYPE vllm:odd unknown\n"
        "vllm:odd 1\n"
        "vllm:later 2\n"
        "# TYPE vllm:later gauge\n"  # after its sample: still applied, servers are not always strict
        "# EOF\n"
    )
    kinds = {s.name: (s.family, s.type, s.help) for s in parse_exposition(text)}
    preempt = ("vllm:num_preemptions", "counter", "Cumulative number of preemptions.")
    assert kinds["vllm:num_preemptions_total"] == preempt
    assert kinds["vllm:num_preemptions_created"] == preempt
    assert {kinds[f"vllm:e2e_latency{x}"][:2] for x in ("", "_sum", "_count")} == {
        ("vllm:e2e_latency", "summary")
    }
    assert kinds["vllm:odd"][1] == UNTYPED
    assert kinds["vllm:later"][1] == "gauge"


def test_a_suffix_only_joins_a_family_whose_type_has_it() -> None:
    # `_count` of a gauge family is not the gauge: it is its own untyped metric
    text = "# TYPE vllm:queue gauge\nvllm:queue 1\nvllm:queue_count 7\n"
    kinds = {s.name: (s.family, s.type) for s in parse_exposition(text)}
    assert kinds == {"vllm:queue": ("vllm:queue", "gauge"), "vllm:queue_count": ("vllm:queue_count", UNTYPED)}


def test_the_three_tuple_parser_is_unchanged() -> None:
    s = parse_prometheus(VLLM)
    assert ("vllm:prompt_tokens_total", {"engine": "0", "model_name": "gemma3-270m"}, 1536.0) in s
    assert sample_value(s, "vllm:request_success_total") == 12.0
    assert len(s) == len(parse_exposition(VLLM))


def _scrapes(before: str, after: str) -> list[Scrape]:
    return [Scrape(T0, "before", before), Scrape(T0 + timedelta(seconds=30), "after", after)]


def test_samples_are_stored_with_type_and_help_and_read_by_type(wh: Warehouse) -> None:
    after = (
        VLLM.replace(
            'vllm:prompt_tokens_total{engine="0",model_name="gemma3-270m"} 1536.0',
            'vllm:prompt_tokens_total{engine="0",model_name="gemma3-270m"} 2048.0',
        )
        .replace(
            'vllm:num_requests_running{engine="0",model_name="gemma3-270m"} 2.0',
            'vllm:num_requests_running{engine="0",model_name="gemma3-270m"} 0.0',
        )
        .replace(
            '_count{engine="0",model_name="gemma3-270m"} 12.0',
            '_count{engine="0",model_name="gemma3-270m"} 20.0',
        )
    )
    samples = to_samples(_scrapes(VLLM, after), run_id="r1", scenario="concurrency_sweep", level=2)
    assert all(isinstance(s, ServerMetricSample) for s in samples)
    run = make_run("r1", engine="vllm")
    run.server_metrics = samples
    wh.load_run(run)

    stored = wh.query_df(
        "SELECT DISTINCT name, family, metric_type, metric_help FROM server_metrics ORDER BY name"
    ).to_dicts()
    rows = {r["name"]: r for r in stored}
    assert rows["vllm:prompt_tokens_total"]["metric_type"] == "counter"
    assert rows["vllm:num_requests_running"]["metric_type"] == "gauge"
    assert rows["vllm:time_to_first_token_seconds_bucket"]["family"] == "vllm:time_to_first_token_seconds"
    assert rows["vllm:time_to_first_token_seconds_count"]["metric_type"] == "histogram"
    assert rows["vllm:cache_config_info"]["metric_type"] == "untyped"
    assert rows["vllm:cache_config_info"]["metric_help"] is None
    assert "\n" in rows["vllm:request_success_total"]["metric_help"]

    view = {
        (r["name"]): r
        for r in wh.query_df(
            "SELECT name, metric_type, cumulative, first_value, last_value, max_value, increase "
            "FROM v_server_metrics WHERE labels NOT LIKE '%\"le\"%'"
        ).to_dicts()
    }
    # a counter is read as its increase over the level ...
    tok = view["vllm:prompt_tokens_total"]
    assert tok["cumulative"] and tok["increase"] == 512.0
    assert view["vllm:time_to_first_token_seconds_count"]["increase"] == 8.0
    # ... a gauge as the level it is: no increase to misread
    running = view["vllm:num_requests_running"]
    assert running["cumulative"] is False and running["increase"] is None
    assert (running["first_value"], running["last_value"], running["max_value"]) == (2.0, 0.0, 2.0)
    assert view["vllm:prompt_tokens_created"]["cumulative"] is False
    assert view["vllm:cache_config_info"]["increase"] is None


def test_a_v3_warehouse_migrates_keeping_its_server_metrics(tmp_path: Path) -> None:
    path = tmp_path / "v3.duckdb"
    old = create_at_version(path, 3)
    run = make_run("old-run").run
    have = {r[0] for r in old.con.execute("SELECT name FROM pragma_table_info('runs')").fetchall()}
    cols = [c for c in column_names(RunRecord) if c in have]  # the run columns a v3 file had
    old.con.execute(
        f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        [getattr(run, c) for c in cols],
    ).fetchall()
    v3_cols = [
        c for c in column_names(ServerMetricSample) if c not in ("family", "metric_type", "metric_help")
    ]
    assert v3_cols == [
        r[0] for r in old.con.execute("SELECT name FROM pragma_table_info('server_metrics')").fetchall()
    ]
    old.con.execute(
        "INSERT INTO server_metrics VALUES ('old-run', 'smoke', 0, ?, 'after', "
        "'llamacpp:prompt_tokens_total', '{}', 64)",
        [T0],
    ).fetchall()
    old.close()

    with Warehouse.open(path) as w:
        assert w.schema_version == current_schema_version() >= 4
        got = w.query_df("SELECT * FROM server_metrics").to_dicts()
        assert got == [
            {
                "run_id": "old-run",
                "scenario": "smoke",
                "level": 0,
                "scraped_at": T0,
                "phase": "after",
                "name": "llamacpp:prompt_tokens_total",
                "labels": "{}",
                "value": 64.0,
                # not recorded before v4: NULL, never a guess from the name
                "family": None,
                "metric_type": None,
                "metric_help": None,
            }
        ]
        old_view = w.query_df("SELECT family, cumulative, increase FROM v_server_metrics").to_dicts()
        assert old_view == [{"family": "llamacpp:prompt_tokens_total", "cumulative": None, "increase": None}]
        # and new samples load beside it with their types
        fresh = make_run("new-run")
        fresh.server_metrics = to_samples(_scrapes(LLAMA, LLAMA), run_id="new-run", scenario="smoke", level=0)
        w.load_run(fresh)
        assert w.query_df(
            "SELECT DISTINCT metric_type FROM server_metrics WHERE run_id = 'new-run' ORDER BY 1"
        )["metric_type"].to_list() == ["counter", "gauge"]
