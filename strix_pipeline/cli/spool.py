"""`strix load-spool`: load the runs a failed warehouse load left in ``<artifacts>/spool/``.

A benchmark writes its records to a spool file before it opens the warehouse; when the load fails
(another writer held the file past the lock wait, a full disk, a damaged file) the file stays. The
next benchmark load takes it too; this command does it now, oldest first, each file deleted once its
load committed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from strix_pipeline.cli.common import as_markup, lock_wait_arg, open_warehouse, shown, warehouse_arg
from strix_pipeline.config_load import load_config
from strix_pipeline.outside_text import visible
from strix_pipeline.warehouse import WarehouseError
from strix_pipeline.warehouse.spool import Spooled, drain, pending, spool_dir


def load_spool(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    directory = Path(args.spool) if args.spool else spool_dir(load_config(args.config).artifacts_dir())
    files = pending(directory)
    if not files:
        console.print(f"no spooled runs in {directory}", markup=False)
        return 0
    rows: list[tuple[Text, Text, Text]] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task(f"loading {len(files)} spooled runs", total=len(files))

        def on_file(path: Path, spooled: Spooled | None) -> None:
            progress.advance(task)
            if spooled is not None:
                r = spooled.result
                rows.append((shown(r.run.run_id), shown(r.run.status), Text(f"{len(r.requests)} requests")))

        try:
            wh = open_warehouse(
                args,
                read_only=False,
                lock_retry_s=args.lock_wait,
                on_wait=lambda m: progress.console.print(f"[yellow]{as_markup(m)}[/]"),
            )
            with wh:
                report = drain(wh, directory, on_file=on_file)
        except WarehouseError as e:
            console.print(f"strix load-spool: {e}", style="red", soft_wrap=True, markup=False)
            console.print(f"{len(rows)} loaded; the rest stay in {directory}", markup=False)
            return 1
    table = Table(title=f"loaded from {as_markup(directory)}")
    for col in ("run", "status", "rows"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    for _, why in report.unreadable:
        console.print(f"strix load-spool: {visible(why)}", style="red", soft_wrap=True, markup=False)
    return 1 if report.unreadable else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "load-spool",
        help="load the runs a failed warehouse load left in <artifacts>/spool/",
        description="Load every spool file (a run's records written before the warehouse was opened) "
        "into the warehouse, oldest first, deleting each once its load committed. A run loaded again "
        "replaces its rows, so this is safe to repeat. Exit 1 when a file could not be loaded.",
    )
    warehouse_arg(p)
    p.add_argument("--spool", help="spool directory (default: <project.artifacts>/spool)")
    lock_wait_arg(p)
    p.set_defaults(func=load_spool)
