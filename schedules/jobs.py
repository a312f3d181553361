"""The jobs: refresh, analysis, benchmark (all hosts, one host, the whole graph for `make run`).

The host is a dimension of every benchmark run: a host's own job ``benchmark_<host>_job`` tags every
run it launches ``strix/host=<host>`` (the UI's Runs page filters by it), so a backfill of one host's
partitions from that job runs only that host.
"""

import re

import dagster as dg

from assets.partitions import HOST_TAG, image_versions

ANALYSIS_KEYS = ("run_aggregates", "regressions", "trend_charts", "switch_decision", "weekly_report")
ANALYSIS = dg.AssetSelection.assets(*ANALYSIS_KEYS)

refresh_job = dg.define_asset_job(
    "refresh_images_job",
    selection=dg.AssetSelection.assets("engine_images"),
    description="Discover engine image versions in the configured registries.",
)
analysis_job = dg.define_asset_job(
    "analysis_job",
    selection=ANALYSIS,
    description="Recompute aggregates, change points, charts, the switch decision and the weekly report.",
)


def benchmark_job_for(benchmark_keys: list[str]):
    return dg.define_asset_job(
        "benchmark_job",
        selection=dg.AssetSelection.assets(*benchmark_keys),
        partitions_def=image_versions,
        description="Benchmark one image version on its host (one engine at a time per host).",
    )


def host_job_name(host: str) -> str:
    """``benchmark_<host>_job``: Dagster names allow letters, digits and underscores only."""
    return f"benchmark_{re.sub(r'[^A-Za-z0-9_]', '_', host)}_job"


def host_job_for(host: str, benchmark_key: str):
    """One host's benchmark: the launchpad and partition backfills of this job run on that host only,
    and every run carries ``strix/host=<host>`` (job tags become run tags)."""
    return dg.define_asset_job(
        host_job_name(host),
        selection=dg.AssetSelection.assets(benchmark_key),
        partitions_def=image_versions,
        tags={HOST_TAG: host},
        description=f"Benchmark image versions on host `{host}` (its pool admits one engine at a time).",
    )


def main_job_for(benchmark_keys: list[str]):
    """What `make run` executes: the whole graph for one image version (the local baseline)."""
    return dg.define_asset_job(
        "main_job",
        selection=dg.AssetSelection.assets("engine_images", *benchmark_keys) | ANALYSIS,
        partitions_def=image_versions,
        description="Refresh images, benchmark one image version, recompute trends and the decision.",
    )


def bisect_job_for(benchmark_keys: list[str]):
    """One step of a bisection: the benchmark of one release between a change's brackets
    (strix_pipeline/analysis/bisect/steps.py). Requested by ``bisect_sensor`` (or run by `strix bisect`); its
    runs carry ``strix/bisect=<bisection id>``."""
    return dg.define_asset_job(
        "bisect_job",
        selection=dg.AssetSelection.assets(*benchmark_keys),
        partitions_def=image_versions,
        tags={"strix/purpose": "bisect"},
        description=(
            "Benchmark the release a bisection needs next (the midpoint between a confirmed change's "
            "brackets); the regressions asset then puts it on a side and names the next one."
        ),
    )
