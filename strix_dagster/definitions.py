"""The one composition root: strix.toml -> assets, checks, jobs, sensor, schedule and resources.

A bad configuration fails here, at load, with the file, the key path and the problem.
"""

from __future__ import annotations

import os

import dagster as dg

from assets.analysis import regressions, run_aggregates, switch_decision, trend_charts, weekly_report
from assets.benchmark import benchmark_hosts, build_benchmark_assets
from assets.comparisons import (
    build_box_comparisons,
    canary_comparison,
    engine_comparison,
    release_comparisons,
)
from assets.images import engine_images
from assets.resources import (
    HostAccessResource,
    PairRunnerResource,
    RegistryResource,
    StrixConfigResource,
    WarehouseResource,
)
from schedules import (
    analysis_job,
    benchmark_job_for,
    bisect_job_for,
    build_bisect_sensor,
    build_production_watch,
    build_schedule,
    build_sensor,
    host_job_for,
    main_job_for,
    refresh_job,
    warehouse_backup_job,
    warehouse_backup_schedule,
)
from strix_dagster.pair_bisect_job import pair_bisect_job
from strix_pipeline.config import DockerHostConfig, StrixConfig, config_path
from strix_pipeline.config_load import load_config


def _secret(name: str) -> dg.EnvVar | None:
    """An EnvVar when the variable is set; optional secrets stay None instead of failing the load."""
    return dg.EnvVar(name) if os.environ.get(name) else None


def build_definitions(config: StrixConfig, path: str) -> dg.Definitions:
    benchmark_assets = build_benchmark_assets(config)
    bench_keys = [a.key.to_user_string() for a in benchmark_assets]
    benchmark_job = benchmark_job_for(bench_keys)
    bisect_job = bisect_job_for(bench_keys)
    ssh_hosts = [
        h
        for h in config.hosts.values()
        if isinstance(h, DockerHostConfig) and h.docker_host.startswith("ssh://")
    ]
    user_env = next((h.ssh_user_env for h in ssh_hosts if h.ssh_user_env), "STRIX_SSH_USER")
    key_env = next((h.ssh_key_path_env for h in ssh_hosts if h.ssh_key_path_env), "STRIX_SSH_KEY_PATH")
    # run_aggregates reads every host's benchmark asset (`benchmark_run_<host>` with several hosts).
    aggregates = dg.map_asset_specs(lambda s: s.replace_attributes(deps=bench_keys), [run_aggregates])[0]
    return dg.Definitions(
        assets=[
            engine_images,
            *benchmark_assets,
            aggregates,
            regressions,
            release_comparisons,
            canary_comparison,
            engine_comparison,
            *build_box_comparisons(config),
            trend_charts,
            switch_decision,
            weekly_report,
        ],
        jobs=[
            refresh_job,
            benchmark_job,
            bisect_job,
            pair_bisect_job,
            analysis_job,
            warehouse_backup_job,
            main_job_for(bench_keys),
            # the host as a dimension: one job per host, its runs tagged strix/host=<host>
            *(host_job_for(h, key) for h, key in zip(benchmark_hosts(config), bench_keys, strict=True)),
        ],
        sensors=[
            build_sensor(benchmark_job),
            build_bisect_sensor(bisect_job, pair_bisect_job),
            dg.AutomationConditionSensorDefinition(
                "analysis_automation",
                target=dg.AssetSelection.groups("analysis", "decision"),
                default_status=dg.DefaultSensorStatus.STOPPED,
                minimum_interval_seconds=60,
                description=(
                    "Recomputes aggregates, change points, charts and the decision after new results, and "
                    "the comparisons by pairs, which start engines on host local (so off until turned on)."
                ),
            ),
            # each Box's production between runs; not defined where no Box has one
            *filter(None, [build_production_watch(config)]),
        ],
        schedules=[build_schedule(config, [a.key for a in benchmark_assets]), warehouse_backup_schedule],
        resources={
            "strix": StrixConfigResource(config_path=path),
            "pair_runner": PairRunnerResource(),
            # the config's warehouse_target(): its file, or its DuckLake (the DSN read when a run opens it)
            "warehouse": WarehouseResource(config_path=path),
            "registry": RegistryResource(
                dockerhub_username=_secret("STRIX_DOCKERHUB_USERNAME"),
                dockerhub_token=_secret("STRIX_DOCKERHUB_TOKEN"),
                ghcr_username=_secret("STRIX_GHCR_USERNAME"),
                ghcr_token=_secret("STRIX_GHCR_TOKEN"),
            ),
            # The Box's SSH user and key: required (EnvVar) only when a host reaches Docker over SSH.
            "host_access": HostAccessResource(
                ssh_user=dg.EnvVar(user_env) if ssh_hosts else None,
                ssh_key_path=_secret(key_env),
                ssh_user_env=user_env,
                ssh_key_path_env=key_env,
            ),
        },
    )


def load_definitions(path: str | None = None) -> dg.Definitions:
    path = str(path or config_path())
    return build_definitions(load_config(path), path)


def current_definitions() -> dg.Definitions:
    """The definitions of the configuration ``$STRIX_CONFIG`` names now (not at import): what a run
    started in this process loads its job from (strix_dagster/recorded.py)."""
    return load_definitions()


defs = load_definitions()
