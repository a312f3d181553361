"""`strix run`: benchmark image versions once (default: the local engine builds), then the analysis.

The Dagster layer does the work in its own process (``python -m strix_dagster.run``, Dagster's
in-process executor against the persistent instance in ``$DAGSTER_HOME``, default ./.dagster, so
`make ui` shows the runs afterwards); this command reports from the warehouse and fails when a run
measured nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strix_pipeline.config import config_path
from strix_pipeline.config_load import load_config
from strix_pipeline.warehouse import Warehouse, WarehouseMissing
from strix_pipeline.warehouse.spool import pending, spool_dir


def run(args: argparse.Namespace) -> int:
    console = Console()
    path = str(Path(args.config or config_path()).resolve())
    config = load_config(path)  # fail on a bad config before anything starts
    with tempfile.TemporaryDirectory(prefix="strix-run-") as tmp:
        summary_file = Path(tmp) / "summary.json"
        cmd = [sys.executable, "-m", "strix_dagster.run", "--config", path, "--summary", str(summary_file)]
        for key in args.partition or []:
            cmd += ["--partition", key]
        for name in args.engine or []:
            cmd += ["--engine", name]
        if getattr(args, "history", None):  # strix history: the runs are one backfill in the UI
            cmd += ["--history", args.history]
        # The Dagster layer runs in its own process: the domain and this CLI never import Dagster.
        code = subprocess.run(cmd, check=False).returncode
        if not summary_file.exists():
            console.print(f"[red]strix run: the Dagster run did not complete (exit {code})[/]")
            return code or 1
        summary = json.loads(summary_file.read_text())
    dagster_runs = summary["runs"]
    ok = all(r["success"] for r in dagster_runs)
    home = summary["dagster_home"]

    target = config.warehouse_target()  # the file, or the DuckLake the runs were loaded into
    table = Table(title="strix run", show_header=False)
    for r in dagster_runs:
        what = r["partition"] or "analysis"
        table.add_row(
            "Dagster run", f"{r['dagster_run_id']} {what} ({'success' if r['success'] else 'FAILED'})"
        )
    table.add_row("warehouse", str(target))
    runs: list[dict] = []
    try:
        with Warehouse.open(target, read_only=True) as wh:
            ids = [r["dagster_run_id"] for r in dagster_runs]
            runs = wh.query_df(RUNS_OF_DAGSTER_RUNS_SQL, [ids]).to_dicts()
            table.add_row("runs / requests", f"{wh.count('runs')} / {wh.count('requests')}")
            for r in runs:
                table.add_row(
                    "run",
                    f"{r['run_id']}: {r['status']}, {r['measured_ok']} measured ok {r['failure_reason'] or ''}",
                )
    except WarehouseMissing:
        pass  # nothing was loaded: nothing_measured says so
    charts = config.artifacts_dir() / "charts" / "index.html"
    table.add_row("charts", str(charts) if charts.exists() else "(not written)")
    report = config.artifacts_dir() / "report" / "index.html"
    table.add_row("weekly report", str(report) if report.exists() else "(not written)")
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

    spooled = pending(spool_dir(config.artifacts_dir()))
    if spooled:  # measured, but the warehouse refused the load (the step's error says why)
        console.print(
            f"strix run: {len(spooled)} measured run(s) are not in the warehouse yet, kept in "
            f"{spooled[0].parent}; `strix load-spool` loads them",
            style="yellow",
            soft_wrap=True,
            markup=False,
        )
    if not ok:
        return 1
    return 1 if problems else 0


# The benchmark runs some Dagster runs produced, with what each measured (warm-up excluded).
RUNS_OF_DAGSTER_RUNS_SQL = """
SELECT r.run_id, r.engine, r.status, r.failure_reason,
       (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id AND q.ok AND NOT q.warmup) AS measured_ok
FROM runs r WHERE list_contains(?, r.dagster_run_id) ORDER BY r.started_at
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
    p.add_argument(
        "--partition",
        action="append",
        help="image version key ENGINE:VERSION@DIGEST12, repeatable (default: every local engine build)",
    )
    p.add_argument(
        "--engine",
        action="append",
        help="only this engine's local build (repeatable; e.g. --engine llamacpp leaves vLLM out)",
    )
    p.set_defaults(func=run)
