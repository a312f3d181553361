"""Done when: a test loads the Definitions and fails on any error; `dagster definitions validate` passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from support.paths import REPO
from support.pipeline_helpers import write_config

from strix_dagster.definitions import build_definitions, load_definitions
from strix_pipeline.config import ConfigError

EXPECTED_ASSETS = {
    "engine_images",
    "benchmark_run",
    "run_aggregates",
    "regressions",
    "release_comparisons",
    "canary_comparison",
    "engine_comparison",
    "trend_charts",
    "switch_decision",
    "weekly_report",
}
EXPECTED_JOBS = {"refresh_images_job", "benchmark_job", "analysis_job", "main_job", "pair_bisect_job"}
EXAMPLE = REPO / "config" / "strix-halo.example.toml"


def _validate(defs: dg.Definitions) -> dg.Definitions:
    """Resolve everything the webserver would: jobs, asset graph, sensors, schedules, resources."""
    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    repo.load_all_definitions()
    return defs


def _asset_names(defs: dg.Definitions) -> set[str]:
    return {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}


def test_default_definitions_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRIX_CONFIG", raising=False)
    defs = _validate(load_definitions())
    assert _asset_names(defs) == EXPECTED_ASSETS
    assert EXPECTED_JOBS <= {j.name for j in defs.resolve_all_job_defs()}
    # every automation can start an engine: none is on until the user turns it on
    for name in ("new_image_sensor", "bisect_sensor", "analysis_automation"):
        assert defs.resolve_sensor_def(name).default_status == dg.DefaultSensorStatus.STOPPED, name
    # no Box with production to watch: the production watch is not defined
    assert "production_watch" not in {s.name for s in defs.get_repository_def().sensor_defs}
    schedule = defs.resolve_schedule_def("weekly_benchmark")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.cron_schedule == "0 3 * * 1"
    # Every asset that touches a host runs in that host's pool; the others in none.
    graph = defs.resolve_asset_graph()
    bench = graph.get(dg.AssetKey("benchmark_run"))
    assert bench.pools == {"host_local"}
    # the week's comparisons by pairs start engines on host local: its pool too
    pairs = {"release_comparisons", "canary_comparison", "engine_comparison"}
    for name in pairs:
        assert graph.get(dg.AssetKey(name)).pools == {"host_local"}, name
    for name in EXPECTED_ASSETS - {"benchmark_run", *pairs}:
        assert not graph.get(dg.AssetKey(name)).pools, name
    # Every asset carries a description a person can read in the UI.
    for name in EXPECTED_ASSETS:
        assert (graph.get(dg.AssetKey(name)).description or "").strip(), name


def test_module_level_defs_load() -> None:
    from strix_dagster import definitions

    _validate(definitions.defs)


def test_example_config_definitions_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # Secrets come from the environment; a load must not need the real ones to build the graph.
    monkeypatch.setenv("STRIX_SSH_USER", "tester")
    defs = _validate(load_definitions(str(EXAMPLE)))
    names = _asset_names(defs)
    assert {"engine_images", "run_aggregates", "regressions", "trend_charts", "switch_decision"} <= names
    assert any(n.startswith("benchmark_run") for n in names)
    graph = defs.resolve_asset_graph()
    bench_keys = [k for k in graph.get_all_asset_keys() if k.to_user_string().startswith("benchmark_run")]
    # The analysis reads every benchmark asset: none of them may dangle outside the graph.
    aggregates_deps = graph.get(dg.AssetKey("run_aggregates")).parent_keys
    for key in bench_keys:
        assert graph.get(key).pools, f"{key.to_user_string()} runs in no host pool"
        assert key in aggregates_deps, f"run_aggregates does not depend on {key.to_user_string()}"
    assert not [k for k in graph.get_all_asset_keys() if graph.get(k).is_external], "external stub assets"
    # the Box has production: the watch is defined and running, every few minutes
    watch = defs.resolve_sensor_def("production_watch")
    assert watch.default_status == dg.DefaultSensorStatus.RUNNING
    assert watch.minimum_interval_seconds == 180


def test_two_host_config_definitions_load(tmp_path: Path) -> None:
    """A local host and a docker host: one benchmark asset per host, each in its own pool."""
    path = write_config(tmp_path, box=True)
    defs = _validate(load_definitions(str(path)))
    graph = defs.resolve_asset_graph()
    pools = {
        k.to_user_string(): graph.get(k).pools
        for k in graph.get_all_asset_keys()
        if k.to_user_string().startswith("benchmark_run")
    }
    assert pools == {"benchmark_run_local": {"host_local"}, "benchmark_run_box": {"host_box"}}
    deps = graph.get(dg.AssetKey("run_aggregates")).parent_keys
    assert {dg.AssetKey(k) for k in pools} <= deps
    assert not [k for k in graph.get_all_asset_keys() if graph.get(k).is_external], "external stub assets"


def test_bad_config_fails_the_load(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    path.write_text(path.read_text().replace('[engines.vllm]\nkind = "vllm"', '[engines.vllm]\nkind = "vlm"'))
    with pytest.raises(ConfigError, match=r"engines\.vllm\.kind"):
        load_definitions(str(path))


def test_build_definitions_resources_point_at_the_config(tmp_path: Path) -> None:
    from strix_pipeline.config_load import load_config

    path = write_config(tmp_path)
    config = load_config(path)
    defs = build_definitions(config, str(path))
    resources = defs.resources
    assert resources["warehouse"].target() == tmp_path / "warehouse" / "strix.duckdb"
    assert resources["strix"].config_path == str(path)


def test_dagster_definitions_validate_cli() -> None:
    """The CLI the webserver's loader uses: the workspace loads in a fresh process and validates."""
    env = {k: v for k, v in os.environ.items() if k not in ("STRIX_CONFIG", "DAGSTER_HOME")}
    dagster = Path(sys.executable).parent / "dagster"
    proc = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "All code locations passed validation" in out, out[-4000:]
