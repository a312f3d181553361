"""`strix run`: benchmark image versions once (default: the local engine builds), then the analysis.

The Dagster layer does the work in its own process (``python -m strix_dagster.run``, Dagster's
in-process executor against the persistent instance in ``$DAGSTER_HOME``, default ./.dagster, so
`make ui` shows the runs afterwards); this command reports from the warehouse and fails when a run
measured nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strix_pipeline.analysis.decision.sentence import headline
from strix_pipeline.config import config_path
from strix_pipeline.config_load import load_config
from strix_pipeline.quality.score import score
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
        dagster_log = run_log_path(config.artifacts_dir())
        code = run_dagster(cmd, dagster_log, verbose=getattr(args, "verbose", False))
        if not summary_file.exists():
            console.print(f"[red]strix run: the Dagster run did not complete (exit {code})[/]")
            return code or 1
        summary = json.loads(summary_file.read_text())
    dagster_runs = summary["runs"]
    ok = all(r["success"] for r in dagster_runs)
    home = summary["dagster_home"]

    decision_file = config.artifacts_dir() / "decision.json"
    decision = json.loads(decision_file.read_text()) if decision_file.exists() else None
    console.print()
    console.print(decision_line(decision), style="bold", soft_wrap=True, markup=False)

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
        with Warehouse.open_reader(target) as wh:
            ids = [r["dagster_run_id"] for r in dagster_runs]
            runs = wh.query_df(RUNS_OF_DAGSTER_RUNS_SQL, [ids]).to_dicts()
            table.add_row("runs / requests", f"{wh.count('runs')} / {wh.count('requests')}")
            for r in runs:
                quality = (
                    f", evaluation set {score(r['quality_passed'], r['quality_items']).text()}"
                    if r["quality_items"]
                    else ""
                )
                # an ok run's reason is a note (a retried connection), never to be read as a failure
                said = r["failure_reason"] or ""
                said = f"; note: {said}" if said and r["status"] == "ok" else f" {said}"
                table.add_row(
                    "run", f"{r['run_id']}: {r['status']}, {r['measured_ok']} measured ok{quality}{said}"
                )
    except WarehouseMissing:
        pass  # nothing was loaded: nothing_measured says so
    charts = config.artifacts_dir() / "charts" / "index.html"
    table.add_row("charts", str(charts) if charts.exists() else "(not written)")
    report = config.artifacts_dir() / "report" / "index.html"
    table.add_row("weekly report", str(report) if report.exists() else "(not written)")
    if decision is not None:
        d = decision
        table.add_row("decision", f"{d['verdict']} ({decision_file})")
        for c in d["criteria"]:
            table.add_row(f"  {c['criterion']} {c['name']}", f"{c['status']}: {c['reason']}")
    table.add_row("query", 'strix query "SELECT * FROM v_runs"')
    table.add_row("UI", f"make ui -> http://127.0.0.1:3000 (DAGSTER_HOME={home})")
    table.add_row("Dagster log", str(dagster_log) if dagster_log.exists() else "(on the terminal: -v)")
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


def run_log_path(artifacts: Path) -> Path:
    """Where this run's whole Dagster output is kept (one file per `strix run`, by its start time)."""
    return artifacts / "logs" / f"strix-run-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.log"


# A line of Dagster's console logger: "<date> <time> <tz> - dagster - LEVEL - job - run id - [step - ]message"
_DAGSTER_LINE = re.compile(
    r"^\S+ \S+ [+-]\d{4} - dagster - (?P<level>[A-Z]+) - \S+ - [0-9a-f-]{36} - "
    r"(?:(?P<step>[\w.\[\]-]+) - )?(?P<message>.*)$"
)
# "[run] concurrency_sweep level 5: 90 request(s)": its result line follows, which is what is shown
_LEVEL_START = re.compile(r"\] \S+ level \S+: \d+ request\(s\)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def terminal_line(line: str) -> str | None:
    """What the terminal shows of one line of the Dagster process (None: the log file only).

    The process's own step lines (``strix run: ...``) as they are; of Dagster's events, what the
    steps said at INFO and above (each engine's progress, the analysis, warnings and failures),
    trimmed to the step and the message, without a level's start (its result line follows);
    Dagster's DEBUG events, library output and tracebacks stay in the log file, which a failure's
    message names.
    """
    line = _ANSI.sub("", line.rstrip("\n"))
    if line.startswith("strix run:"):
        return line
    m = _DAGSTER_LINE.match(line)
    if m is None or m["level"] == "DEBUG" or (m["level"] == "INFO" and _LEVEL_START.search(m["message"])):
        return None
    where = f"{m['step']}: " if m["step"] else ""
    flag = "" if m["level"] == "INFO" else f"{m['level']}: "
    return f"  {flag}{where}{m['message']}"


def run_dagster(cmd: list[str], log: Path, verbose: bool = False) -> int:
    """Run the Dagster process with its whole output in ``log``, showing ``terminal_line`` of each
    line (``verbose``: every line, and no log file); its exit status."""
    if verbose:
        return subprocess.run(cmd, check=False).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"strix run: the whole Dagster log: {log}", flush=True)
    env = os.environ | {"PYTHONUNBUFFERED": "1"}  # its lines in the order it wrote them
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                out.flush()
                shown = terminal_line(line)
                if shown is not None:
                    print(shown, flush=True)
        finally:
            code = proc.wait()
    if code != 0:
        print(f"strix run: the Dagster process exited {code}; its whole log: {log}", flush=True)
    return code


def decision_line(decision: dict | None) -> str:
    """The decision, plainly: the verdict and why (or which criteria did not pass)."""
    if decision is None:
        return "decision: none (the analysis wrote no decision.json)"
    answer = headline(decision["verdict"]).rstrip(":")
    verdict = decision["verdict"] + (", provisional" if decision.get("provisional") else "")
    where = f" on {decision['host']}" if decision.get("host") else ""
    why = decision.get("reason") or ", ".join(
        f"{c['criterion']} {c['status']}" for c in decision.get("criteria", [])
    )
    return f"decision{where}: {answer} ({verdict})" + (f" — {why}" if why else "")


# The benchmark runs some Dagster runs produced, with what each measured (warm-up excluded).
RUNS_OF_DAGSTER_RUNS_SQL = """
SELECT r.run_id, r.engine, r.status, r.failure_reason,
       (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id AND q.ok AND NOT q.warmup) AS measured_ok,
       (SELECT count(*) FILTER (WHERE a.passed) FROM quality_answers a WHERE a.run_id = r.run_id)
           AS quality_passed,
       (SELECT count(*) FROM quality_answers a WHERE a.run_id = r.run_id) AS quality_items
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
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="every line of the Dagster process on the terminal (default: one line per step, the rest "
        "in a log file it names)",
    )
    p.set_defaults(func=run)
