"""`strix bisect --metric M --between A B`: find the first release between A and B that shows a change.

The same search the regressions asset starts for a confirmed change (strix_pipeline/analysis/bisect/steps.py),
by hand: the releases between A and B that were never benchmarked are found among the engine's image
versions (`strix images`), the midpoint is benchmarked (a run of Dagster's ``bisect_job``, in its own
process like `strix run`), put on A's or B's side by its interval, and so on, at most
``--max-runs`` runs (default ``[analysis] bisect_max_runs``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from strix_pipeline.analysis.bisect.steps import BisectError, start, steps_text
from strix_pipeline.cli.common import shown
from strix_pipeline.config import config_path
from strix_pipeline.config_load import load_config
from strix_pipeline.warehouse import Warehouse, WarehouseError

# Where each metric is measured when --scenario/--level are not given (the decision's concurrency
# for the sweep's metrics).
DEFAULT_SCENARIO = {
    "ttft_p95_ms": "concurrency_sweep",
    "tpot_p95_ms": "concurrency_sweep",
    "output_tokens_per_s": "concurrency_sweep",
    "decode_tokens_per_s": "decode",
    "held_bytes": "memory",
}


def bisect(args: argparse.Namespace) -> int:
    console = Console()
    path = str(Path(args.config or config_path()).resolve())
    config = load_config(path)
    scenario = args.scenario or DEFAULT_SCENARIO.get(args.metric)
    if scenario is None:
        console.print(f"[red]strix bisect: --metric {shown(args.metric)} needs --scenario and --level[/]")
        return 2
    level = args.level
    if level is None:
        level = {"concurrency_sweep": config.decision.concurrency, "decode": 1, "memory": 0}.get(scenario)
    if level is None:
        console.print(f"[red]strix bisect: --scenario {shown(scenario)} needs --level[/]")
        return 2
    host = args.host or config.decision.host
    before, after = args.between
    try:
        with Warehouse.open(config.warehouse_target()) as wh:
            b = start(
                wh,
                config,
                host=host,
                engine=args.engine,
                metric=args.metric,
                scenario=scenario,
                level=level,
                before=before,
                after=after,
                max_runs=args.max_runs,
            )
    except (BisectError, WarehouseError) as e:
        console.print(f"[red]strix bisect: {shown(e)}[/]")
        return 2
    console.print(shown(f"strix bisect {b.bisection_id}: {b.status}: {b.reason}"))
    if b.status == "running":
        with tempfile.TemporaryDirectory(prefix="strix-bisect-") as tmp:
            summary = Path(tmp) / "summary.json"
            cmd = [sys.executable, "-m", "strix_dagster.run", "--config", path, "--bisect", b.bisection_id]
            code = subprocess.run([*cmd, "--summary", str(summary)], check=False).returncode
            if not summary.exists():
                console.print(f"[red]strix bisect: the Dagster runs did not complete (exit {code})[/]")
                return code or 1
    with Warehouse.open_reader(config.warehouse_target()) as wh:
        b = next(x for x in wh.list_bisections() if x.bisection_id == b.bisection_id)
        steps = steps_text(wh, b)
    console.print(
        shown(
            f"{b.engine} on {b.host}: {b.metric} {b.scenario}@{b.level}, {b.version_before} -> "
            f"{b.version_after}"
        )
    )
    for line in steps:
        console.print(shown(f"  {line}"))
    console.print(shown(f"result: {b.status}: {b.reason}"))
    return 0 if b.status in ("found", "nothing_between") else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bisect",
        help="benchmark the releases between two versions until the first one showing a change is found",
        description=__doc__,
    )
    p.add_argument(
        "--metric", required=True, help="ttft_p95_ms, output_tokens_per_s, prefill_tokens_per_s, ..."
    )
    p.add_argument(
        "--between",
        nargs=2,
        metavar=("A", "B"),
        required=True,
        help="the version without the change, and the one with it",
    )
    p.add_argument("--engine", default="llamacpp", help="the engine (default llamacpp)")
    p.add_argument("--host", help="the host (default: the decision's host)")
    p.add_argument("--scenario", help="where the metric is measured (default by metric)")
    p.add_argument("--level", type=int, help="the scenario's level (default: the decision's concurrency)")
    p.add_argument("--max-runs", type=int, help="at most this many runs (default [analysis] bisect_max_runs)")
    p.set_defaults(func=bisect)
