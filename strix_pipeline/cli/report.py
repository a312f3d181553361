"""`strix report [--out DIR]`: the weekly report's static site, written from the warehouse (the same
site the `weekly_report` asset writes to the artifacts folder)."""

from __future__ import annotations

import argparse
from pathlib import Path

from strix_pipeline.cli.common import (
    config_of,
    error,
    on_warehouse,
    open_reader,
    warehouse_arg,
)
from strix_pipeline.cli.out_guard import protected, within
from strix_pipeline.report import ReportFolderError, ReportSite, write_report
from strix_pipeline.safe_write import UnsafeTarget
from strix_pipeline.warehouse import Warehouse


def out_dir_problem(args: argparse.Namespace, out: Path) -> str | None:
    """Why the site cannot be written to ``out`` (one line), or None: never into the warehouse, the
    lake's data, the spool or the configuration."""
    for place, what in protected(args):
        if within(out, place):
            return f"--out {out}: that is inside {what} ({place}); choose another folder"
    if not out.resolve().parent.is_dir():
        return f"--out {out}: the folder {out.resolve().parent} does not exist"
    return None


def run_report(args: argparse.Namespace) -> int:
    config = config_of(args)
    out = Path(args.out) if args.out else config.artifacts_dir() / "report"
    problem = out_dir_problem(args, out)
    if problem:
        return error(problem)

    def write(wh: Warehouse) -> ReportSite:
        return write_report(wh, config, out)

    try:
        site, code = on_warehouse(args, write, "strix report", opener=open_reader)
    except ReportFolderError as e:
        return error(f"--out {e}")
    except (
        UnsafeTarget
    ) as e:  # a link where a page, the feed or runs/ goes: named, nothing written through it
        return error(f"--out {out}: {e}")
    if site is None:
        return code
    print(f"strix report: {site.index} ({site.run_pages} run pages)")
    print(f"  verdict: {site.verdict or 'no evaluation yet'}")
    print(f"  feed: {site.feed} ({len(site.entries)} entries, {len(site.new_entries)} new)")
    print("  publish: copy the folder to any static host, or serve it: python -m http.server -d " + str(out))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write the weekly report (a static site and an Atom feed) from the warehouse",
        description=__doc__,
    )
    p.add_argument("--out", help="the site's folder (default: the artifacts folder's report/)")
    warehouse_arg(p)
    p.set_defaults(func=run_report)
