"""The weekly report: a static site (verdict and what changed, trend charts, support matrix, latest
figures, a page per run) and an Atom feed, written from the warehouse.

Re-exports only: ``gather`` reads the warehouse, ``extras`` what the bisection and the canary
add when present, ``since`` what changed since the last report, ``charts`` the linked trend charts,
``markup`` escaping and formats, ``pages`` the HTML, ``feed`` the Atom feed, ``names`` the file names,
``site`` writes it all.
"""

from strix_pipeline.report.feed import FEED_ID, Entry, feed_entries, feed_xml
from strix_pipeline.report.names import FEED, INDEX, RUNS_DIR, STATE, run_page
from strix_pipeline.report.site import ReportFolderError, ReportSite, check_folder, write_report
from strix_pipeline.report.site_data import Evaluation, ReportData, gather

__all__ = [
    "FEED",
    "FEED_ID",
    "INDEX",
    "RUNS_DIR",
    "STATE",
    "Entry",
    "Evaluation",
    "ReportData",
    "ReportFolderError",
    "ReportSite",
    "check_folder",
    "feed_entries",
    "feed_xml",
    "gather",
    "run_page",
    "write_report",
]
