"""The report's site read as files: every link is a file of the site, every string from the warehouse
is text, each run has its page with its command line, times are in the configured zone, the charts'
points open their runs' pages, and "what changed" compares with the last report."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from support.report_seed import HOSTILE, LLAMA_COMMAND, REPORT_AT, ZONE, report_warehouse

from strix_pipeline.report import INDEX, ReportFolderError, run_page, write_report
from strix_pipeline.report.markup import local_time


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self.scripts: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag in ("a", "link") and a.get("href"):
            self.hrefs.append(a["href"])
        if tag == "script":
            self.scripts.append(a)


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text())
    return p


def _broken_links(site: Path) -> list[str]:
    broken = []
    for page in [site / INDEX, *sorted((site / "runs").glob("*.html"))]:
        for href in _parse(page).hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc:
                broken.append(f"{page.name}: {href} leaves the site")
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.is_file() or site.resolve() not in target.parents:
                broken.append(f"{page.name}: {href} is no file of the site")
            elif parts.fragment and parts.fragment not in _parse(target).ids:
                broken.append(f"{page.name}: {href} names no element")
    return broken


def _chart_specs(index: Path) -> list[dict]:
    blocks = re.findall(
        r"<script type='application/json' class='strix-chart'[^>]*>(.*?)</script>", index.read_text()
    )
    return [json.loads(b) for b in blocks]


def test_every_link_is_a_file_of_the_site_and_every_run_has_its_page(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb", hostile=True)
    with wh:
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
        run_ids = wh.run_ids()
    assert site.run_pages == len(run_ids) == 5
    assert sorted(p.name for p in (tmp_path / "site" / "runs").iterdir()) == sorted(
        Path(run_page(r)).name for r in run_ids
    )
    assert _broken_links(tmp_path / "site") == []
    links = _parse(site.index).hrefs
    for r in run_ids:  # each run is reached from the index (the matrix, the tables, the evidence)
        assert run_page(r) in links, r
    llama = (tmp_path / "site" / run_page("llama-qwen")).read_text()
    assert f"<pre>{LLAMA_COMMAND}</pre>" in llama
    assert "strix-halo/llamacpp/qwen3-30b-a3b-q4/Q4_K_M" in llama  # the fingerprint
    assert "listening on 127.0.0.1" in llama  # the log tail


def test_no_string_from_the_warehouse_becomes_markup(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb", hostile=True)
    with wh:
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
    pages = [site.index, *sorted((tmp_path / "site" / "runs").glob("*.html"))]
    for page in pages:
        text = page.read_text()
        assert "data-pwned" not in re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S).replace(
            "setAttribute(&#x27;data-pwned", ""
        ), page.name
        for payload in HOSTILE:
            assert payload not in text.replace("\\u003c", "<"), page.name
    scripts = _parse(site.index).scripts
    # the page's own: the Vega bundle, the boot script, and one JSON block per chart (no src=, no other)
    assert all("src" not in s for s in scripts)
    assert sum(1 for s in scripts if s.get("type") != "application/json") == 2
    hostile_page = (tmp_path / "site" / run_page("h1")).read_text()
    assert "&lt;img src=x onerror=" in hostile_page


def test_times_are_in_the_configured_zone_and_numbers_carry_units_and_intervals(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb")
    with wh:
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
        evaluated_at = wh.query_df("SELECT max(evaluated_at) AS t FROM decisions")["t"][0]
    text = site.index.read_text()
    assert ZONE == "Europe/Berlin" and local_time(evaluated_at, ZONE) == "2026-09-14 08:00 CEST"
    assert "<time id='verdict-date'" in text and "2026-09-14 08:00 CEST</time>" in text
    assert "<strong id='verdict-value'>evaluate</strong>" in text
    # vLLM's TTFT p95 at 5 clients with its interval, and its held memory
    assert "820 ms (95 % CI 760–900 ms)" in text
    assert "41.50 GiB" in text


def test_each_chart_point_opens_its_runs_page(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb", hostile=True)
    with wh:
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
    specs = _chart_specs(site.index)
    # the answer's forest plot, then the six trend charts with something to draw (this seed has no
    # prefill ladder and no decode efficiency: those two are their notes, never an empty panel)
    assert len(specs) == 7
    hrefs = set()
    linked_marks: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("run_id") and isinstance(node.get("run_id"), str):
                assert node.get("href") == run_page(node["run_id"]), node
                hrefs.add(node["href"])
            if "mark" in node and node.get("encoding", {}).get("href"):
                assert node["encoding"]["href"] == {"field": "href", "type": "nominal"}
                # never on a line or an aggregate: the link would split it into a piece per run
                mark = node["mark"]["type"] if isinstance(node["mark"], dict) else node["mark"]
                assert mark != "line", node
                assert not any(isinstance(e, dict) and e.get("aggregate") for e in node["encoding"].values())
                linked_marks.append(mark)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for spec in specs:
        walk(spec)
    assert hrefs and all((tmp_path / "site" / h).is_file() for h in hrefs)
    assert "point" in linked_marks and "rule" in linked_marks
    ttft = json.dumps(specs[1])
    assert '"href": {"field": "href", "type": "nominal"}' in ttft


def test_what_changed_is_measured_from_the_last_report(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb")
    with wh:
        first = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT).index.read_text()
        second = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT + timedelta(days=7)).index.read_text()
    news = lambda text: text.split("id='changes-h'")[1].split("id='trends-h'")[0]  # noqa: E731
    assert "in the 7 days before this first report" in news(first)
    assert "changed</strong> from unknown to <strong>evaluate" in news(first)
    assert "server-rocm-b6400 → server-rocm-b6500" in news(first)  # the confirmed regression
    assert "MXFP4 MoE kernels unavailable on gfx1151" in news(first)  # the failed run and why
    assert "since the last report" in news(second)
    assert "unchanged: evaluate" in news(second)
    assert (
        news(second).count("<p>none</p>") == 6
    )  # criteria, versions, regressions, improvements, drift, failures


def test_the_report_refuses_a_folder_that_is_not_a_report(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    wh, cfg = report_warehouse(tmp_path / "w.duckdb")
    with wh, pytest.raises(ReportFolderError, match="mine: holds files and no report.json"):
        write_report(wh, cfg, tmp_path / "mine", now=REPORT_AT)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
