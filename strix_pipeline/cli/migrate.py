"""`strix migrate`: bring the warehouse to this code's schema and views now.

Readers (`strix query`, `strix report`, the charts) open the warehouse read-only and cannot migrate
it; after an upgrade they refuse its older views until a writer has opened it. A run or a load does
that on its way; this command does it alone, under the same lock, and says what it applied.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from rich.console import Console

from strix_pipeline.cli.common import (
    lock_wait_arg,
    on_warehouse,
    open_warehouse,
    warehouse_arg,
    warehouse_path,
)
from strix_pipeline.warehouse import Warehouse


def migrate(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)

    def applied(wh: Warehouse) -> tuple[int, list[tuple[int, str]]]:
        # opening it as a writer migrated it; what this open applied carries this open's time
        rows = wh.con.execute(
            "SELECT version, name FROM schema_version WHERE applied_at >= ? ORDER BY version", [started]
        ).fetchall()
        return wh.schema_version, rows

    def writer(a: argparse.Namespace, *, read_only: bool) -> Warehouse:
        return open_warehouse(a, read_only=read_only, lock_retry_s=a.lock_wait)

    got, rc = on_warehouse(args, applied, read_only=False, opener=writer)
    if got is None:
        return rc
    version, steps = got
    done = (
        f"migrated to schema v{version} ({', '.join(f'v{v} {name}' for v, name in steps)}); views re-created"
        if steps
        else f"already at schema v{version}; its views are the project's"
    )
    Console(stderr=True).print(f"{warehouse_path(args)}: {done}", markup=False, soft_wrap=True)
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
