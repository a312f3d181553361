"""Dagster-native numbers: the key figures are numeric metadata, so each asset's
plots in the UI show them over materialisations, and table metadata is typed (numbers as numbers,
None when missing).

switch_decision and run_aggregates are materialised for real (dg.materialize on a seeded warehouse,
twice, as two evaluations a week apart would be) and their metadata read back from the instance the
way the UI reads it; benchmark_run's table and figures are built from records (running the suite
is tests/integration/llama/test_pipeline.py's job).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from support.decision_seed import GIB, make_config, run_record, run_result, september_runs, switch_runs
from support.paths import REPO

from assets.analysis import run_aggregates, switch_decision
from assets.benchmark import key_figures, summary_table
from assets.decision_plots import VERDICT_SCORE
from assets.resources import StrixConfigResource, WarehouseResource
from strix_pipeline.records import LevelAggregate
from strix_pipeline.warehouse import Warehouse


def test_verdict_scores_are_ordered_and_documented() -> None:
    assert VERDICT_SCORE == {"switch": 3, "evaluate": 2, "stay": 1, "unknown": 0}
    desc = switch_decision.specs_by_key[dg.AssetKey("switch_decision")].description
    assert "switch=3, evaluate=2, stay=1, unknown=0" in desc


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The analysis assets' resources over a warehouse in tmp_path (the config built in code)."""
    base = make_config()
    project = base.project.model_copy(
        update={"artifacts": str(tmp_path / "artifacts"), "warehouse": str(tmp_path / "w.duckdb")}
    )
    config = base.model_copy(update={"project": project})
    monkeypatch.setattr(StrixConfigResource, "get", lambda self: config)
    monkeypatch.delenv(config.decision.webhook_url_env, raising=False)
    resources = {
        "strix": StrixConfigResource(config_path="in-code"),
        "warehouse": WarehouseResource(path=config.project.warehouse, lock_retry_s=5.0),
    }
    return config, resources


def _metadata(instance: dg.DagsterInstance, key: str) -> list[dict]:
    records = instance.fetch_materializations(dg.AssetKey(key), limit=10, ascending=True).records
    return [r.asset_materialization.metadata for r in records]


def test_switch_decision_figures_are_numbers_over_time(pipeline) -> None:
    config, resources = pipeline
    now = datetime.now(UTC)
    with dg.instance_for_test() as instance:
        # week 1: the September state (evaluate); week 2: everything passes (switch)
        for runs in (september_runs(now - timedelta(days=8)), switch_runs(now - timedelta(hours=3))):
            with Warehouse.open(config.warehouse_path()) as wh:
                wh.load_runs(runs)
            result = dg.materialize([switch_decision], resources=resources, instance=instance)
            assert result.success
        metas = _metadata(instance, "switch_decision")
    assert len(metas) == 2
    first, second = metas
    # the verdict as a person reads it may carry a note ("switch (provisional)"); the score is the verdict's
    assert [m["verdict"].value.split()[0] for m in metas] == ["evaluate", "switch"]
    assert isinstance(first["verdict_score"], dg.IntMetadataValue)
    assert [m["verdict_score"].value for m in metas] == [2, 3]
    # the answer in one sentence, also at the head of the decision's markdown
    assert first["sentence"].value.startswith(
        "Not yet: stay on llama-server for now. vLLM v0.11.0 starts and its TTFT p95 at 5 clients"
    )
    assert second["sentence"].value.startswith("Switch: move to vLLM v0.11.0")
    assert first["decision"].value.startswith(first["sentence"].value + "\n\n**Verdict: `evaluate`**")
    assert first["decision concurrency (clients)"].value == config.decision.concurrency == 5
    ttft, output, held = (
        "C3 TTFT p95 at 5 clients (ms)",
        "C3 output at 5 clients (tok/s)",
        "C5 memory held after load (GiB)",
    )
    for m in metas:
        for key in (ttft, output, held):
            for role in ("candidate", "baseline"):
                assert isinstance(m[f"{key} · {role}"], dg.FloatMetadataValue), (role, key)
    # the C3 pair at 5 clients: vLLM 820 ms vs llama-server 1450 ms (seeded output 100 tok/s each)
    assert first[f"{ttft} · candidate"].value == 820.0
    assert first[f"{ttft} · baseline"].value == 1450.0
    assert first[f"{output} · candidate"].value == 100.0
    assert first["ratio · C3 TTFT p95 at 5 clients, candidate / baseline (×)"].value == round(820 / 1450, 3)
    # C5's runs, in GiB: 41.5 GiB held by vLLM in September, 18 GiB once it passes
    assert first[f"{held} · candidate"].value == pytest.approx(41.5)
    assert second[f"{held} · candidate"].value == pytest.approx(18.0)
    assert first[f"{held} · baseline"].value == pytest.approx(19.0)
    assert second["ratio · C5 memory held after load, candidate / baseline (×)"].value == round(18 / 19, 3)


PLOTTED = (dg.IntMetadataValue, dg.FloatMetadataValue)
# a plotted key that names no unit: a count, or a score its asset's description explains
UNITLESS = {"verdict_score", "dagster/row_count"}


def test_the_plots_view_pairs_candidate_and_baseline_with_units(pipeline) -> None:
    """Dagster's Plots view draws one chart per numeric key, headed by the key, the keys in sorted
    order two to a row, every y axis titled "Value": the keys name their metric and unit, and each
    metric's baseline and candidate charts share a row (then their ratio in one line)."""
    config, resources = pipeline
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_runs(september_runs(datetime.now(UTC) - timedelta(hours=3)))
    with dg.instance_for_test() as instance:
        assert dg.materialize([switch_decision], resources=resources, instance=instance).success
        (meta,) = _metadata(instance, "switch_decision")
    plotted = sorted(k for k, v in meta.items() if isinstance(v, PLOTTED))  # the view's order
    # every chart's heading says what it plots and in what (the axis only ever says "Value")
    assert not [k for k in plotted if k.lower() == "value"]
    assert [k for k in plotted if k not in UNITLESS and not k.endswith(")") and "(" not in k] == []
    pairs = [k.removesuffix(" · baseline") for k in plotted if k.endswith(" · baseline")]
    assert pairs == [
        "C3 TTFT p95 at 5 clients (ms)",
        "C3 output at 5 clients (tok/s)",
        "C5 memory held after load (GiB)",
    ]
    for metric in pairs:  # side by side: baseline on the left of a row, the candidate on its right
        i = plotted.index(f"{metric} · baseline")
        assert i % 2 == 0 and plotted[i + 1] == f"{metric} · candidate", plotted
        words = metric.rsplit(" (", 1)[0]
        ratio = meta[f"ratio · {words}, candidate / baseline (×)"].value
        assert ratio == pytest.approx(
            meta[f"{metric} · candidate"].value / meta[f"{metric} · baseline"].value, abs=1e-3
        )


def test_a_figure_without_evidence_is_absent_not_zero(pipeline) -> None:
    config, resources = pipeline
    # only a failed vLLM run: no C3 or C5 pair, the verdict is "stay" (C1 failed) or "unknown"
    failed = run_result(
        run_record(
            "vllm-broken",
            "vllm",
            started_at=datetime.now(UTC) - timedelta(hours=1),
            status="failed_start",
            failure_reason="HIP error: invalid device function",
        ),
        smoke_ok=None,
    )
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_runs([failed])
    with dg.instance_for_test() as instance:
        assert dg.materialize([switch_decision], resources=resources, instance=instance).success
        (meta,) = _metadata(instance, "switch_decision")
    assert meta["verdict_score"].value == VERDICT_SCORE[meta["verdict"].value.split()[0]]
    assert not any(k.startswith(("candidate_", "baseline_")) for k in meta), sorted(meta)


def test_run_aggregates_table_is_typed(pipeline) -> None:
    config, resources = pipeline
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_runs(september_runs(datetime.now(UTC) - timedelta(hours=2)))
    with dg.instance_for_test() as instance:
        assert dg.materialize([run_aggregates], resources=resources, instance=instance).success
        (meta,) = _metadata(instance, "run_aggregates")
    table = meta["latest"].value
    types = {c.name: c.type for c in table.schema.columns}
    assert types["level"] == "int" and types["requests_ok"] == "int"
    assert types["ttft_p95_ms"] == "float" and types["output_tokens_per_s"] == "float"
    assert types["engine"] == "string" and types["status"] == "string"
    sweep = next(
        r.data
        for r in table.records
        if r.data["engine"] == "vllm" and r.data["scenario"] == "concurrency_sweep"
    )
    assert sweep["ttft_p95_ms"] == 820.0 and isinstance(sweep["level"], int)
    assert sweep["prefill_tokens_per_s"] is None  # missing is None, never "" or "nan"
    # the failed gpt-oss run shows with no aggregates: every number None
    failed = next(r.data for r in table.records if r.data["model_profile"] == "gpt-oss-120b")
    assert failed["status"] == "failed_start" and failed["ttft_p95_ms"] is None and failed["level"] is None


def test_benchmark_summary_table_is_typed() -> None:
    aggs = [
        LevelAggregate("local-llamacpp-gemma-1a2b3c4d", "smoke", 1, "single", 1, 0, 1.0, ttft_p50_ms=41.234),
        LevelAggregate(
            "local-llamacpp-gemma-1a2b3c4d",
            "concurrency_sweep",
            2,
            "concurrency",
            2,
            1,
            5.0,
            ttft_p50_ms=50.0,
            ttft_p95_ms=61.25,
            tpot_p50_ms=8.1234,
            e2e_p95_ms=400.0,
            output_tokens_per_s=33.333,
        ),
    ]
    table = summary_table(aggs)
    types = {c.name: c.type for c in table.schema.columns}
    assert types == {
        "run_id": "string",
        "scenario": "string",
        "level": "int",
        "ok": "int",
        "failed": "int",
        "ttft_p50_ms": "float",
        "ttft_p95_ms": "float",
        "tpot_p50_ms": "float",
        "e2e_p95_ms": "float",
        "output_tok_s": "float",
        "prefill_tok_s": "float",
    }
    smoke, sweep = (r.data for r in table.records)
    assert smoke["ttft_p50_ms"] == 41.23 and smoke["ttft_p95_ms"] is None and smoke["prefill_tok_s"] is None
    assert sweep["ttft_p95_ms"] == 61.25 and sweep["tpot_p50_ms"] == 8.123 and sweep["output_tok_s"] == 33.33
    assert sweep["failed"] == 1 and sweep["run_id"] == "2b3c4d"
    assert all(
        isinstance(v, (int, float)) for k, v in sweep.items() if types[k] != "string" and v is not None
    )
    # the table survives Dagster's serialisation as it is (what the UI receives)
    from dagster._serdes import deserialize_value, serialize_value

    assert deserialize_value(serialize_value(table)) == table


def test_benchmark_key_figures_per_model_profile() -> None:
    now = datetime.now(UTC)
    ok = run_result(
        run_record("vllm-qwen", "vllm", started_at=now, held_gib=41.5),
        sweep={2: (300.0, 60.0), 5: (820.0, 95.5)},
    )
    failed = run_result(
        run_record("vllm-gptoss", "vllm", started_at=now, profile="gpt-oss-120b", status="failed_start"),
        smoke_ok=None,
    )
    figures = key_figures([ok, failed], concurrency=5)
    assert figures == {
        "qwen3-30b-a3b/ttft_p95_ms@5": dg.MetadataValue.float(820.0),
        "qwen3-30b-a3b/output_tok_s@5": dg.MetadataValue.float(95.5),
        "qwen3-30b-a3b/held_gib": dg.MetadataValue.float(41.5),
    }
    # a sweep without the decision's level says nothing at that level
    assert "qwen3-30b-a3b/ttft_p95_ms@8" not in key_figures([ok], concurrency=8)
    assert ok.run.held_bytes == int(41.5 * GIB)


def test_the_dg_project_entry_names_the_same_code_location() -> None:
    """pyproject's [tool.dg] (for `dg dev` / `dg check defs`), [tool.dagster] and workspace.yaml agree."""
    import importlib.util
    import tomllib

    import yaml

    root = REPO
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]
    (entry,) = yaml.safe_load((root / "workspace.yaml").read_text())["load_from"]
    module = entry["python_module"]["module_name"]
    assert tool["dg"]["directory_type"] == "project"
    project = tool["dg"]["project"]
    assert project["code_location_target_module"] == tool["dagster"]["module_name"] == module
    assert project["code_location_name"] == tool["dagster"]["code_location_name"]
    assert module.startswith(project["root_module"] + ".")
    assert importlib.util.find_spec(project["root_module"]) is not None
