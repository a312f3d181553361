"""The weekly report opened in a real headless Chromium (the system's, driven by Playwright): it loads
from its file with no console error and no request outside the site, shows the warehouse's verdict
and date, every link it has (the HTML's and the charts' SVG's) is a file of the site, a run page shows
its command line, and no string from the warehouse runs as script (each payload would mark <html>)."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import need
from playwright.sync_api import sync_playwright
from support.report_seed import LLAMA_COMMAND, REPORT_AT, SCRIPT, report_warehouse

from strix_pipeline.report import run_page, write_report
from strix_pipeline.report.markup import local_time

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ALL_LINKS = """() => [...document.querySelectorAll('a')].map(a =>
    a.href instanceof SVGAnimatedString ? new URL(a.href.baseVal, document.baseURI).href : a.href)"""


@pytest.fixture(scope="module")
def browser():
    need(
        Path(CHROMIUM).exists() or shutil.which("chromium") is not None,
        "Chromium",
        "apt-get install chromium",
    )
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Visit:
    """One page opened with every console message, page error and request recorded; anything not a
    file of ``site`` is refused before it leaves."""

    def __init__(self, browser, site: Path, page_file: Path) -> None:
        self.site = site.resolve()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.context = browser.new_context(viewport={"width": 390, "height": 800})
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.context.route("**/*", self._route)
        self.page.goto(page_file.resolve().as_uri())

    def _route(self, route) -> None:
        url = route.request.url
        if self.in_site(url) or url.startswith("data:"):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def in_site(self, url: str) -> bool:
        parts = urlsplit(url)
        if parts.scheme != "file":
            return False
        path = Path(unquote(parts.path)).resolve()
        return self.site in path.parents and path.is_file()

    def close(self) -> None:
        self.context.close()


@pytest.mark.chromium
def test_the_report_opens_offline_with_the_warehouses_verdict_and_links_inside(
    browser, tmp_path: Path
) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb", hostile=True)
    with wh:
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
        stored = wh.query_df(
            "SELECT verdict, evaluated_at FROM decisions ORDER BY evaluated_at DESC LIMIT 1"
        ).row(0, named=True)
    visit = Visit(browser, tmp_path / "site", site.index)
    page = visit.page
    # every chart drew (Vega parsed its JSON block and rendered SVG marks)
    page.wait_for_function(
        "() => [...document.querySelectorAll('script.strix-chart')].every("
        "s => document.getElementById(s.dataset.target).querySelector('svg.marks'))",
        timeout=60_000,
    )
    assert page.locator("#verdict-value").text_content() == stored["verdict"] == "evaluate"
    assert page.locator("#verdict-date").inner_text() == local_time(
        stored["evaluated_at"], cfg.project.timezone
    )
    assert page.evaluate("document.documentElement.getAttribute('data-pwned')") is None
    assert SCRIPT in page.locator("#matrix").inner_text()  # the hostile version, shown as text
    links = page.evaluate(ALL_LINKS)
    assert len(links) > 10
    assert [u for u in links if not visit.in_site(u.split("#")[0])] == []
    for u in {u for u in links if "#" in u and u.split("#")[0] == site.index.resolve().as_uri()}:
        assert page.locator(f"[id='{u.split('#')[1]}']").count() == 1, u
    # keyboard: the first Tab reaches the skip link, which leads to the verdict
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('href')") == "#verdict"
    assert visit.errors == [] and visit.outside == []
    # a chart point opens its run's page (Vega-Lite's href channel; the TTFT chart's first point is
    # llama-server's run, the only one of its series)
    with page.expect_navigation():
        page.locator("#chart-ttft_p95_by_version svg .mark-symbol path").first.click(force=True)
    assert page.url.startswith(site.index.parent.resolve().as_uri() + "/runs/"), page.url
    assert visit.in_site(page.url) and "Command line" in page.locator("main").inner_text()
    assert visit.errors == [] and visit.outside == []
    visit.close()

    run = Visit(browser, tmp_path / "site", tmp_path / "site" / run_page("llama-qwen"))
    assert LLAMA_COMMAND in run.page.locator("pre").first.inner_text()
    assert [u for u in run.page.evaluate(ALL_LINKS) if not run.in_site(u.split("#")[0])] == []
    assert run.errors == [] and run.outside == []
    run.close()
    hostile = Visit(browser, tmp_path / "site", tmp_path / "site" / run_page("h1"))
    assert hostile.page.evaluate("document.documentElement.getAttribute('data-pwned')") is None
    assert "onerror=" in hostile.page.locator("main").inner_text()
    assert hostile.errors == [] and hostile.outside == []
    hostile.close()
