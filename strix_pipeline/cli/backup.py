"""`strix backup`: a consistent copy of the warehouse (a DuckDB file under the writer's lock after a
checkpoint, or a DuckLake catalog's ``pg_dump``), the newest ``--keep`` kept (warehouse/backup.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from strix_pipeline.cli.common import config_of, error, warehouse_arg, warehouse_path
from strix_pipeline.warehouse.backup import KEEP, backup, default_directory
from strix_pipeline.warehouse.errors import WarehouseError


def run_backup(args: argparse.Namespace) -> int:
    target = warehouse_path(args)
    if isinstance(target, Path) and not target.exists():
        return error(f"{target}: no warehouse here yet: nothing to back up")
    directory = Path(args.to) if args.to else default_directory(target, config_of(args).artifacts_dir())
    try:
        made = backup(target, directory, args.keep)
    except (WarehouseError, OSError) as e:
        return error(str(e))
    Console(stderr=True).print(made.describe(), markup=False, soft_wrap=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "backup",
        help="a consistent copy of the warehouse, the newest --keep kept",
        description="Copy the warehouse while no writer can change it: a DuckDB file under the writer's "
        "lock after a checkpoint, a DuckLake catalog with pg_dump (its Parquet data files are only ever "
        "added: back them up as files). Copies are named by their UTC time; the oldest beyond --keep "
        "are removed. The weekly schedule warehouse_backup (STOPPED until turned on) does the same.",
    )
    warehouse_arg(p)
    p.add_argument("--to", help="directory for the copies (default: backups/ beside the warehouse file)")
    p.add_argument(
        "--keep", type=int, default=KEEP, help=f"copies of this warehouse to keep (default {KEEP})"
    )
    p.set_defaults(func=run_backup)
