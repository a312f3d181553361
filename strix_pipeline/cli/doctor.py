"""`strix doctor`: run first on a new machine or Box; non-zero when something required is missing."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from strix_pipeline.config import config_path
from strix_pipeline.config_load import load_config
from strix_pipeline.doctor import failed, run_checks


def doctor(args: argparse.Namespace) -> int:

    console = Console() if sys.stdout.isatty() else Console(width=160)
    path = str(args.config or config_path())
    config = load_config(path)
    with console.status("checking each host…"):
        checks = run_checks(config, start_engines=not args.no_start, engines=args.engine)
    table = Table(title=f"strix doctor ({path})")
    for col in ("host", "check", "state", "detail", "how to fix"):
        table.add_column(col, overflow="fold")
    colour = {"ok": "green", "missing": "red", "not available": "yellow"}
    for c in checks:
        table.add_row(c.host, c.name, f"[{colour[c.state]}]{c.state}[/]", c.detail, c.fix or "")
    console.print(table)
    bad = failed(checks)
    if bad:
        console.print(
            f"[red]strix doctor: {len(bad)} required piece(s) missing: "
            f"{', '.join(f'{c.host}/{c.name}' for c in bad)}[/]"
        )
        return 1
    console.print("[green]strix doctor: everything required is there[/]")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check what each configured host needs (run first on a new machine)")
    p.add_argument("--no-start", action="store_true", help="do not start the embedded engines (faster)")
    p.add_argument("--engine", action="append", help="only what this engine needs (repeatable)")
    p.set_defaults(func=doctor)
