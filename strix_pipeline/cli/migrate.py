"""`strix migrate`: bring the warehouse to this code's schema and views now.

Readers (`strix query`, `strix report`, the charts) open the warehouse read-only and cannot migrate
it; after an upgrade they refuse its older views until a writer has opened it. A run or a load does
that on its way; this command does it alone, under the same lock, and says what it applied.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from rich.console import Console

from strix_pipeline.cli.common import lock_wait_arg, open_warehouse, warehouse_arg, warehouse_path
from strix_pipeline.warehouse import WarehouseError


def migrate(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    started = datetime.now(UTC)
    target = warehouse_path(args)
    try:
        with open_warehouse(args, read_only=False, lock_retry_s=args.lock_wait) as wh:
            applied = wh.con.execute(
                "SELECT version, name FROM schema_version WHERE applied_at >= ? ORDER BY version", [started]
            ).fetchall()
            version = wh.schema_version
    except WarehouseError as e:
        console.print(f"strix migrate: {e}", style="red", soft_wrap=True, markup=False)
        return 1
    if applied:
        steps = ", ".join(f"v{v} {name}" for v, name in applied)
        console.print(
            f"{target}: migrated to schema v{version} ({steps}); views re-created",
            markup=False,
            soft_wrap=True,
        )
    else:
        console.print(
            f"{target}: already at schema v{version}; its views are the project's",
            markup=False,
            soft_wrap=True,
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "migrate",
        help="bring the warehouse to this code's schema and views (readers cannot)",
        description="Open the warehouse as a writer: apply the schema migrations it lacks and re-create "
        "the project's views, then say which were applied. Safe to repeat. Readers (strix query, strix "
        "report) refuse a warehouse whose views are older than this code until a writer has opened it.",
    )
    warehouse_arg(p)
    lock_wait_arg(p)
    p.set_defaults(func=migrate)
