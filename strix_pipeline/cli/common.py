"""What every command shares: the ``--warehouse`` option, opening it, and a one-line error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from strix_pipeline.config import DuckLakeTarget, load_config
from strix_pipeline.warehouse import Warehouse


def warehouse_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--warehouse",
        help="warehouse file (default: the configuration's [warehouse]: project.warehouse, or its DuckLake)",
    )


def warehouse_path(args: argparse.Namespace) -> Path | DuckLakeTarget:
    """``--warehouse`` (a DuckDB file), else the configuration's warehouse: the file
    ``project.warehouse``, or the DuckLake lakehouse of ``[warehouse] backend = "ducklake"``."""
    if getattr(args, "warehouse", None):
        return Path(args.warehouse)
    return load_config(getattr(args, "config", None)).warehouse_target()


def open_warehouse(
    args: argparse.Namespace,
    *,
    read_only: bool,
    lock_retry_s: float = 10.0,
    on_wait: Callable[[str], None] | None = None,
    **kwargs: object,
) -> Warehouse:
    return Warehouse.open(
        warehouse_path(args), read_only=read_only, lock_retry_s=lock_retry_s, on_wait=on_wait, **kwargs
    )


def error(msg: str) -> int:
    print(f"strix: {msg}", file=sys.stderr)
    return 1
