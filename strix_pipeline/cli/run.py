"""`strix run`: materialise the whole graph once, in-process, for one image version.

On the embedded default that is the local llama-server build; the run lands in the persistent
Dagster instance under .dagster/ (``DAGSTER_HOME``), so `make ui` shows it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strix_pipeline.config import REPO_ROOT, config_path, load_config


def _prepare_dagster_home() -> str:
    home = os.environ.get("DAGSTER_HOME") or str(REPO_ROOT / ".dagster")
    os.makedirs(home, exist_ok=True)
    target = os.path.join(home, "dagster.yaml")
    if not os.path.exists(target) and (REPO_ROOT / "dagster.yaml").exists():
        shutil.copy(REPO_ROOT / "dagster.yaml", target)
    os.environ["DAGSTER_HOME"] = home
    return home


def _selection(config, key: str):  # noqa: ANN001, ANN202 - StrixConfig -> list[AssetKey] | None
    """With several benchmarked hosts, only the benchmark assets of the hosts that run this image."""
    from dagster import AssetKey

    from assets.benchmark import benchmark_asset_key, benchmark_hosts
    from schedules import ANALYSIS_KEYS
    from strix_pipeline import plan
    from strix_pipeline.warehouse import Warehouse

    if len(benchmark_hosts(config)) <= 1 or not config.warehouse_path().exists():
        return None
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        image = plan.find_image(wh.known_images(), key)
    if image is None and plan.parse_partition_key(key).engine in plan.local_engines(config):
        image = plan.local_image(plan.parse_partition_key(key).engine)
    if image is None:
        return None
    hosts = sorted({t.host for t in plan.targets_for(config, image)})
    keys = ["engine_images", *(benchmark_asset_key(config, h) for h in hosts), *ANALYSIS_KEYS]
    return [AssetKey(k) for k in keys]


def run(args: argparse.Namespace) -> int:
    console = Console()
    path = str(args.config or config_path())
    config = load_config(path)  # fail on a bad config before anything starts
    if args.config:
        os.environ["STRIX_CONFIG"] = path
    home = _prepare_dagster_home()

    from dagster import DagsterInstance

    from assets.partitions import image_versions
    from strix_pipeline import plan
    from strix_pipeline.definitions import build_definitions

    key = args.partition
    if key is None:
        engines = plan.local_engines(config)
        if not engines:
            console.print(
                "[red]no local host in the configuration: pass --partition ENGINE:VERSION@DIGEST[/]"
            )
            return 2
        engine = next(iter(engines))
        key = plan.partition_key(engine, plan.local_image(engine))
    defs = build_definitions(config, path)
    instance = DagsterInstance.get()
    if not instance.has_dynamic_partition(image_versions.name, key):
        instance.add_dynamic_partitions(image_versions.name, [key])
    console.rule(f"strix run: {key}")
    job = defs.resolve_job_def("main_job")
    selection = _selection(config, key)
    result = job.execute_in_process(
        instance=instance, partition_key=key, raise_on_error=False, asset_selection=selection
    )
    ok = result.success

    from strix_pipeline.warehouse import Warehouse

    wh_path = config.warehouse_path()
    table = Table(title="strix run", show_header=False)
    table.add_row("Dagster run", f"{result.run_id} ({'success' if ok else 'FAILED'})")
    table.add_row("warehouse", str(wh_path))
    runs: list[dict] = []
    if wh_path.exists():
        with Warehouse.open(wh_path, read_only=True) as wh:
            runs = wh.query_df(RUNS_OF_DAGSTER_RUN_SQL, [result.run_id]).to_dicts()
            table.add_row("runs / requests", f"{wh.count('runs')} / {wh.count('requests')}")
            for r in runs:
                table.add_row(
                    "run",
                    f"{r['run_id']}: {r['status']}, {r['measured_ok']} measured ok {r['failure_reason'] or ''}",
                )
    charts = config.artifacts_dir() / "charts" / "index.html"
    table.add_row("charts", str(charts) if charts.exists() else "(not written)")
    decision_file = config.artifacts_dir() / "decision.json"
    if decision_file.exists():
        d = json.loads(decision_file.read_text())
        table.add_row("decision", f"{d['verdict']} ({decision_file})")
        for c in d["criteria"]:
            table.add_row(f"  {c['criterion']} {c['name']}", f"{c['status']}: {c['reason']}")
    table.add_row("query", 'strix query "SELECT * FROM v_runs"')
    table.add_row("UI", f"make ui -> http://127.0.0.1:3000 (DAGSTER_HOME={home})")
    console.print(table)
    problems = nothing_measured(runs, config.artifacts_dir() / "logs")
    for line in problems:
        console.print(f"[red]strix run: {line}[/]", soft_wrap=True)
    if not ok:
        return 1
    return 1 if problems else 0


# The benchmark runs one Dagster run produced, with what each measured (warm-up excluded).
RUNS_OF_DAGSTER_RUN_SQL = """
SELECT r.run_id, r.engine, r.status, r.failure_reason,
       (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id AND q.ok AND NOT q.warmup) AS measured_ok
FROM runs r WHERE r.dagster_run_id = ? ORDER BY r.started_at
"""


def nothing_measured(runs: list[dict], logs_dir: Path) -> list[str]:
    """One-line diagnoses of the runs that measured no successful request (or of there being no run).

    The results are stored either way; these lines make the command fail, as a run that measured
    nothing must never look like a success.
    """
    if not runs:
        return ["no benchmark run was recorded: nothing was measured"]
    out = []
    for r in runs:
        if not r["measured_ok"]:
            first = (r["failure_reason"] or "no reason recorded").split("; ")[0]
            out.append(
                f"{r['engine']} run {r['run_id']} measured nothing ({r['status']}): {first}; "
                f"logs in {logs_dir / r['run_id']}"
            )
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="materialise the whole graph once (default: the local llama-server build)")
    p.add_argument("--partition", help="image version key ENGINE:VERSION@DIGEST12 (default: the local build)")
    p.set_defaults(func=run)
