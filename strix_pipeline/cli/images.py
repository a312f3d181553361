"""`strix images refresh|list`: engine image discovery from the command line (rules: docs/registry.md).

``refresh`` asks the configured registries and stores what changed; it exits 0 when every repository
answered, 1 when some failed (their known images are kept; the errors are printed and recorded).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from datetime import datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from strix_pipeline.cli.common import shown, warehouse_arg, warehouse_path
from strix_pipeline.config_load import load_config
from strix_pipeline.records import ImageRecord
from strix_pipeline.registry.discovery import DiscoveryReport, refresh_images
from strix_pipeline.warehouse import Warehouse, WarehouseError


def register(sub: argparse._SubParsersAction) -> None:
    images = sub.add_parser("images", help="discover and list engine images", description=__doc__)
    isub = images.add_subparsers(dest="images_command", metavar="ACTION")
    images.set_defaults(func=lambda args: _usage(images))

    r = isub.add_parser("refresh", help="ask the registries what is new, moved (floating tags) and gone")
    r.add_argument("--engine", action="append", metavar="NAME", help="only this engine (repeatable)")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    warehouse_arg(r)
    r.set_defaults(func=run_refresh)

    ls = isub.add_parser("list", help="the images the warehouse knows")
    ls.add_argument("--engine", metavar="NAME", help="only this engine")
    ls.add_argument("--all", action="store_true", help="include images marked gone")
    ls.add_argument("--json", action="store_true", help="print JSON")
    warehouse_arg(ls)
    ls.set_defaults(func=run_list)


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def run_refresh(args: argparse.Namespace) -> int:
    config = load_config(getattr(args, "config", None))
    path = warehouse_path(args)
    try:
        with Warehouse.open(path) as wh:
            report = refresh_images(config, wh, engines=args.engine)
    except ValueError as e:  # unknown engine name
        print(f"strix images refresh: {e}", file=sys.stderr)
        return 2
    except WarehouseError as e:
        print(f"strix images refresh: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report)
    return 1 if report.errors else 0


def _print_report(report: DiscoveryReport) -> None:
    console = _console()
    if report.changed:
        t = Table(title="Image changes")
        for col in ("change", "engine", "image", "digest", "version", "created"):
            t.add_column(col)
        for kind, rows in (("new", report.new), ("moved", report.moved), ("gone", report.gone)):
            for r in rows:
                t.add_row(
                    kind,
                    shown(r.engine),
                    shown(f"{r.registry}/{r.repository}:{r.tag}"),
                    shown(r.digest[:19]),
                    shown(r.version),
                    r.created.strftime("%Y-%m-%d %H:%M") if r.created else "",
                )
        console.print(t)
    console.print(
        f"{report.repositories} repositories: {len(report.new)} new, {len(report.moved)} moved, "
        f"{len(report.gone)} gone, {report.unchanged} unchanged, {len(report.skipped)} skipped, "
        f"{len(report.errors)} failed"
    )
    for s in report.skipped:
        line = shown(f" {s.registry}/{s.repository}:{s.tag}: {s.reason}")
        console.print(Text.assemble(("skipped", "yellow"), line))
    for e in report.errors:
        console.print(Text.assemble(("failed", "red"), shown(f" {e.engine}: {e.recorded}")))


def run_list(args: argparse.Namespace) -> int:
    try:
        with Warehouse.open_reader(warehouse_path(args)) as wh:
            rows = wh.known_images(args.engine)
    except WarehouseError as e:
        print(f"strix images list: {e}", file=sys.stderr)
        return 1
    if not args.all:
        rows = [r for r in rows if not r.gone]
    if args.json:
        print(json.dumps([_as_json(r) for r in rows], indent=2))
        return 0
    t = Table(title=f"Engine images ({len(rows)})")
    for col in ("engine", "image", "digest", "version", "created", "floating", "last seen", "state"):
        t.add_column(col)
    for r in rows:  # known_images orders by engine, repository, sort key: oldest version first
        # every string here came from a registry or the warehouse: shown as text, never as markup
        t.add_row(
            shown(r.engine),
            shown(f"{r.registry}/{r.repository}:{r.tag}"),
            shown(r.digest[:19]),
            shown(r.version),
            r.created.strftime("%Y-%m-%d %H:%M") if r.created else "",
            "yes" if r.floating else "",
            r.last_seen.strftime("%Y-%m-%d %H:%M"),
            f"gone since {r.gone_since:%Y-%m-%d}" if r.gone and r.gone_since else ("gone" if r.gone else ""),
        )
    _console().print(t)
    return 0


def _console() -> Console:
    # Piped output (files, CI logs) keeps one image per line instead of wrapping at 80 columns.
    return Console() if sys.stdout.isatty() else Console(width=200)


def _as_json(r: ImageRecord) -> dict[str, object]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(r).items()}
