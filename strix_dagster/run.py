"""The process `strix run` starts: benchmark image versions once, in-process, then the analysis once.

By default the versions are the local engine builds of the configuration (on the embedded default:
llama-server, and vLLM when it is configured). Each version is one run of ``main_job`` for its
partition without the analysis (engine_images and the benchmark assets of the hosts that run it; one
engine at a time, in the host's pool), then one run of ``analysis_job`` reads everything they wrote.
Runs land in the persistent Dagster instance (``$DAGSTER_HOME``, default ``./.dagster``) with the
code location `make ui` loads (strix_dagster/recorded.py), so the UI lists them under their jobs and on
its timeline afterwards. A JSON summary (the Dagster run ids, success) is written for the CLI, which
reports from the warehouse.

    python -m strix_dagster.run --config FILE [--partition KEY ...] --summary FILE
    python -m strix_dagster.run --config FILE --bisect ID --summary FILE   (strix bisect)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import dagster as dg

from assets.benchmark import benchmark_asset_key
from assets.partitions import image_versions
from strix_dagster.bisect_run import run_bisection
from strix_dagster.definitions import build_definitions
from strix_dagster.history_backfill import HistoryBackfill
from strix_dagster.recorded import execute_recorded
from strix_pipeline import image_scan
from strix_pipeline.config import StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import hosts_of
from strix_pipeline.signals import restore_default_sigint
from strix_pipeline.warehouse import Warehouse, WarehouseMissing

INSTANCE_SETTINGS = Path(__file__).resolve().parent / "dagster.yaml"


def prepare_dagster_home() -> str:
    """``$DAGSTER_HOME`` (default ./.dagster) with the project's instance settings (pools) in place."""
    home = os.environ.get("DAGSTER_HOME") or str(Path.cwd() / ".dagster")
    os.makedirs(home, exist_ok=True)
    target = os.path.join(home, "dagster.yaml")
    if not os.path.exists(target):
        shutil.copy(INSTANCE_SETTINGS, target)
    os.environ["DAGSTER_HOME"] = home
    return home


def known_images(config: StrixConfig) -> list:
    """The images the config's warehouse knows (a file or a DuckLake); none yet: empty."""
    try:
        with Warehouse.open_reader(config.warehouse_target()) as wh:
            return wh.known_images()
    except WarehouseMissing:
        return []


def benchmark_selection(config: StrixConfig, key: str) -> list[dg.AssetKey]:
    """engine_images and the benchmark assets of the hosts that run the version ``key``."""
    image = image_scan.image_for_key(config, known_images(config), key)
    hosts = hosts_of(config, image) if image else list(config.runs)
    return [dg.AssetKey("engine_images"), *(dg.AssetKey(benchmark_asset_key(config, h)) for h in hosts)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--partition", action="append", help="image version key (repeatable)")
    parser.add_argument("--summary", required=True, help="JSON file for the CLI: run ids, success")
    parser.add_argument("--engine", action="append", help="default partitions of these engines only")
    parser.add_argument("--history", help="a history's title: its runs are recorded as one backfill")
    parser.add_argument("--bisect", metavar="ID", help="run the steps of the stored bisection ID")
    args = parser.parse_args(argv)
    # a run worker started with SIGINT ignored could never be interrupted (Dagster's own step handlers
    # come only later); the parent `strix run` has the same guard
    restore_default_sigint()
    config = load_config(args.config)
    os.environ["STRIX_CONFIG"] = args.config  # what the UI's code location loads, for this instance
    prepare_dagster_home()
    if args.bisect:
        return bisect_main(config, args)
    keys = args.partition or image_scan.default_partitions(config, args.engine, known_images(config))
    if not keys:
        print(
            "strix run: no local host in the configuration: pass --partition ENGINE:VERSION@DIGEST",
            file=sys.stderr,
        )
        return 2
    defs = build_definitions(config, args.config)
    instance = dg.DagsterInstance.get()
    runs: list[dict] = []
    backfill = HistoryBackfill.start(instance, args.history, keys) if args.history else None
    for n, key in enumerate(keys, 1):
        if not instance.has_dynamic_partition(image_versions.name, key):
            instance.add_dynamic_partitions(image_versions.name, [key])
        print(f"strix run: benchmarking {key} ({n} of {len(keys)})", flush=True)
        started = time.monotonic()
        result = execute_recorded(
            "main_job",
            instance,
            partition_key=key,
            asset_selection=benchmark_selection(config, key),
            tags=backfill.tags if backfill else None,
        )
        runs.append({"dagster_run_id": result.run_id, "success": result.success, "partition": key})
        print(
            f"strix run: {key}: {_outcome(result.success)} in {time.monotonic() - started:.0f} s", flush=True
        )
    if backfill:
        backfill.finish(instance, defs, all(r["success"] for r in runs))
    print("strix run: analysis (aggregates, change points, charts, decision)", flush=True)
    started = time.monotonic()
    result = execute_recorded("analysis_job", instance)
    runs.append({"dagster_run_id": result.run_id, "success": result.success, "partition": None})
    print(
        f"strix run: analysis: {_outcome(result.success)} in {time.monotonic() - started:.0f} s", flush=True
    )
    Path(args.summary).write_text(json.dumps({"runs": runs, "dagster_home": os.environ["DAGSTER_HOME"]}))
    return 0 if all(r["success"] for r in runs) else 1


def _outcome(success: bool) -> str:
    return "success" if success else "FAILED"


def bisect_main(config: StrixConfig, args: argparse.Namespace) -> int:
    """`strix bisect`: the bisection's steps (bisect_job runs), then the analysis once."""
    defs = build_definitions(config, args.config)
    instance = dg.DagsterInstance.get()
    record, runs = run_bisection(defs, instance, config, args.bisect)
    print("strix run: analysis (aggregates, change points, charts, decision)", flush=True)
    result = execute_recorded("analysis_job", instance)
    runs.append({"dagster_run_id": result.run_id, "success": result.success, "partition": None})
    summary = {"runs": runs, "dagster_home": os.environ["DAGSTER_HOME"], "bisection": record.status}
    Path(args.summary).write_text(json.dumps(summary))
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
