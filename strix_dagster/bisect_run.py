"""A bisection run in-process, step after step (`strix bisect`; the daemon's way is bisect_sensor).

Each step is one run of ``bisect_job`` for the release the bisection names next (a partition of
``benchmark_run``, added when missing), tagged ``strix/bisect=<id>``, so the UI shows every step as a
run of its own; after each, analysis/bisect/steps.advance reads what it stored and names the next release.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from assets.benchmark import benchmark_asset_key
from assets.partitions import image_versions
from schedules.jobs import HOST_TAG
from strix_pipeline.analysis.bisect.steps import BISECT_TAG, advance
from strix_pipeline.config import StrixConfig
from strix_pipeline.warehouse import BisectionRecord, Warehouse


def _get(config: StrixConfig, bisection_id: str) -> BisectionRecord:
    with Warehouse.open_reader(config.warehouse_target()) as wh:
        found = [b for b in wh.list_bisections() if b.bisection_id == bisection_id]
    if not found:
        raise KeyError(f"no bisection {bisection_id!r} in the warehouse")
    return found[0]


def run_bisection(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    config: StrixConfig,
    bisection_id: str,
    log: Callable[[str], None] = print,
) -> tuple[BisectionRecord, list[dict]]:
    """Run the bisection's steps until it ends; its record and the Dagster runs of its steps."""
    runs: list[dict] = []
    b = _get(config, bisection_id)
    job = defs.resolve_job_def("bisect_job")
    while b.status == "running" and b.next_key:
        key = b.next_key
        if not instance.has_dynamic_partition(image_versions.name, key):
            instance.add_dynamic_partitions(image_versions.name, [key])
        log(f"strix bisect: step {b.runs_used + 1} of at most {b.max_runs}: benchmarking {key}")
        result = job.execute_in_process(
            instance=instance,
            partition_key=key,
            raise_on_error=False,
            asset_selection=[dg.AssetKey(benchmark_asset_key(config, b.host))],
            tags={BISECT_TAG: b.bisection_id, HOST_TAG: b.host},
        )
        runs.append({"dagster_run_id": result.run_id, "success": result.success, "partition": key})
        with Warehouse.open(config.warehouse_target()) as wh:
            b = advance(wh, config, b, ran=True)
        log(f"strix bisect: {b.status}: {b.reason}")
    return b, runs
