"""The weekly report written as a static site: ``index.html``, ``runs/<run>.html``, ``glossary.html``,
``feed.xml`` and ``report.json`` (what it saw, for the next report's "what changed"). Everything is in
the folder: it opens from a file, an intranet server or any static host."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from strix_pipeline.config import StrixConfig
from strix_pipeline.report.charts import report_charts
from strix_pipeline.report.feed import Entry, feed_entries, feed_xml
from strix_pipeline.report.glossary import glossary_html
from strix_pipeline.report.markup import link
from strix_pipeline.report.names import FEED, GLOSSARY, INDEX, RUNS_DIR, STATE, run_page
from strix_pipeline.report.pages import index_html
from strix_pipeline.report.run_detail import RUN_PAGE_CSP, run_html
from strix_pipeline.report.since import read_seen, seen_now, since_last, write_seen
from strix_pipeline.report.site_data import gather
from strix_pipeline.safe_write import Folder

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

log = logging.getLogger(__name__)


class ReportFolderError(ValueError):
    """A folder the report will not write into: it holds files that are not a report's."""


@dataclass
class ReportSite:
    out_dir: Path
    index: Path
    feed: Path
    run_pages: int
    entries: list[Entry]
    new_entries: list[Entry]  # not in the last report's feed
    verdict: str | None


def check_folder(out_dir: Path) -> None:
    """The report writes into an empty or new folder, or over an earlier report (its ``report.json``);
    any other folder is refused, named: its files would be mixed with the site's (and its runs/ pages
    replaced)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportFolderError(f"{out_dir}: is a file, not a folder for the report")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / STATE).exists():
        raise ReportFolderError(
            f"{out_dir}: holds files and no {STATE}, so it is no earlier report; give an empty or new folder"
        )


def write_report(
    wh: Warehouse,
    config: StrixConfig,
    out_dir: Path,
    *,
    now: datetime | None = None,
    roles: dict[str, str] | None = None,
) -> ReportSite:
    """Write the site for the warehouse as it stands (at ``now``) into ``out_dir``."""
    out_dir = Path(out_dir)
    check_folder(out_dir)
    data = gather(wh, config, now=now)
    seen = read_seen(out_dir)
    since = since_last(data, seen, "times in " + data.timezone)
    if roles is None:
        roles = {name: e.role for name, e in config.engines.items() if e.role != "tracked"}
    charts = report_charts(wh, changes=data.changes, concurrency=data.concurrency, roles=roles)
    entries = feed_entries(data)

    # Every file through safe_write: an earlier report's folder may hold links (a feed.xml to the
    # warehouse, a runs/ to another folder); each is refused by name, none written or deleted through.
    with Folder.open(out_dir, create=True) as site, site.folder(RUNS_DIR) as runs_dir:
        for name in runs_dir.names():  # a run the warehouse no longer holds has no page
            if name.endswith(".html"):
                runs_dir.remove(name)
        for r in data.runs:
            runs_dir.write_text(PurePosixPath(run_page(r["run_id"])).name, run_html(data, r))
        index = site.write_text(INDEX, index_html(data, since, charts))
        back = f"<p>{link(INDEX, '← the weekly report')}</p>"
        site.write_text(GLOSSARY, glossary_html(RUN_PAGE_CSP, back))
        feed = site.write_text(
            FEED,
            feed_xml(entries, title="strix-pipeline: verdicts, regressions, support", updated=data.as_of),
        )
    old_ids = set(seen.entry_ids) if seen else set()
    write_seen(out_dir, seen_now(data, [e.id for e in entries]))
    return ReportSite(
        out_dir=out_dir,
        index=index,
        feed=feed,
        run_pages=len(data.runs),
        entries=entries,
        new_entries=[e for e in entries if e.id not in old_ids],
        verdict=data.decision.label if data.decision else None,
    )
