"""What every command shares: the ``--warehouse`` option, opening it (or saying why not), and a
one-line error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb
from rich.markup import escape
from rich.text import Text

from strix_pipeline.cli.formats import escape_controls
from strix_pipeline.config import DuckLakeTarget, StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.outside_text import visible
from strix_pipeline.warehouse import Warehouse, WarehouseError

T = TypeVar("T")


def warehouse_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--warehouse",
        help="warehouse file (default: the configuration's [warehouse]: project.warehouse, or its DuckLake)",
    )


def lock_wait_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lock-wait",
        type=float,
        default=10.0,
        help="seconds to wait while another process holds the warehouse (default 10)",
    )


def config_of(args: argparse.Namespace) -> StrixConfig:
    """The configuration the command runs with (``--config``, else the default search), read once per
    command however many of its parts ask (the warehouse, ``--out``'s guard, the query's bounds)."""
    config = getattr(args, "_strix_config", None)
    if config is None:
        config = load_config(getattr(args, "config", None))
        args._strix_config = config
    return config


def warehouse_path(args: argparse.Namespace) -> Path | DuckLakeTarget:
    """``--warehouse`` (a DuckDB file), else the configuration's warehouse: the file
    ``project.warehouse``, or the DuckLake lakehouse of ``[warehouse] backend = "ducklake"``."""
    if getattr(args, "warehouse", None):
        return Path(args.warehouse)
    return config_of(args).warehouse_target()


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


def open_reader(
    args: argparse.Namespace,
    *,
    read_only: bool,
    lock_retry_s: float = 10.0,
    on_wait: Callable[[str], None] | None = None,
) -> Warehouse:
    """``open_warehouse`` for a command that reads the stored views: read-only, it is
    :meth:`Warehouse.open_reader` (sandboxed as `strix query` is); a writer is not."""
    if not read_only:
        return open_warehouse(args, read_only=False, lock_retry_s=lock_retry_s, on_wait=on_wait)
    return Warehouse.open_reader(warehouse_path(args), lock_retry_s=lock_retry_s, on_wait=on_wait)


def on_warehouse(
    args: argparse.Namespace,
    action: Callable[[Warehouse], T],
    failure: str | None = None,
    *,
    read_only: bool = True,
    opener: Callable[..., Warehouse] = open_warehouse,
) -> tuple[T | None, int]:
    """Open the warehouse (with ``opener``), run ``action`` on it and close it: (its result, 0), or
    (None, 1) after one line saying why the file could not be opened -- or, given ``failure``,
    ``failure: why`` the action failed in the warehouse."""
    try:
        wh = opener(args, read_only=read_only)
    except WarehouseError as e:
        return None, error(str(e))
    with wh:
        try:
            return action(wh), 0
        except duckdb.PermissionException as e:
            # a reader is sealed (no file reachable from a stored view's SQL): a view reached for one
            why = f"could not read the warehouse, nothing was written: its SQL reached for a file ({e})"
            return None, error(f"{failure}: {why}" if failure else why)
        except (WarehouseError, duckdb.Error) as e:
            if failure is None:
                raise
            return None, error(f"{failure}: {e}")


def error(msg: str) -> int:
    """One line (or a few) on stderr, ``strix: msg``; a message carries values from outside (a
    warehouse's, a file's), so a control character in it is written as its escape, never acted on."""
    print(f"strix: {escape_controls(msg, keep=chr(10) + chr(9))}", file=sys.stderr)
    return 1


def as_markup(value: object) -> str:
    """A string from outside (a server's reply, a file, the warehouse, the command line) to put into a
    rich markup string: shown as it is, never read as markup (a model's "[/INST]" raised MarkupError,
    "[link=...]" made a hyperlink) and with its control characters written as escapes (:func:`visible`)."""
    return escape(visible(value))


def shown(value: object | None) -> Text:
    """A string from outside (a registry, a warehouse, an imported file) as a rich cell: plain text,
    never markup -- "v9.9.9[/]" would raise MarkupError and "[link=...]" would make a hyperlink."""
    return Text("" if value is None else visible(value))
