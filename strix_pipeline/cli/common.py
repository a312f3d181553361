"""What every command shares: the ``--warehouse`` option, opening it, and a one-line error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from strix_pipeline.config import load_config
from strix_pipeline.warehouse import Warehouse


def warehouse_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warehouse", help="warehouse file (default: project.warehouse from the configuration)")


def warehouse_path(args: argparse.Namespace) -> Path:
    """``--warehouse``, else the configuration's ``project.warehouse``."""
    if getattr(args, "warehouse", None):
        return Path(args.warehouse)
    return load_config(getattr(args, "config", None)).warehouse_path()


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
