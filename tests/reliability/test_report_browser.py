"""The weekly report opened in a real headless Chromium (the system's, driven by Playwright): it loads
from its file with no console error and no request outside the site, shows the warehouse's verdict
and date, every link it has (the HTML's and the charts' SVG's) is a file of the site, a run page shows
its command line, and no string from the warehouse runs as script (each payload would mark <html>).

At 1280 and 390 pixels (a desktop's and a phone's width), on the seeded history and on a `make run`-like stay:
the first screen holds the plain answer, the deciding figure with its interval and the forest plot; each
criterion is a row (a card on the phone) with its reason in full; every chart comparing two engines
shares its y scale (read from its Vega-Lite spec); and nothing is wider than the screen outside a box that
scrolls on its own.

Every table of the report, of a run page and of the charts index, its folded sections opened, at the same
two widths: none is cut or scrolls sideways in its box, no cell's content leaves its cell, and on the
phone each is a card per row or keeps its first column fixed."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import need
from playwright.sync_api import sync_playwright
from support.report_seed import (
    DRIFT,
    LLAMA_COMMAND,
    MAKE_RUN_IDS,
    REPORT_AT,
    SCRIPT,
    history_warehouse,
    make_run_warehouse,
    report_warehouse,
)

from strix_pipeline.analysis.charts import write_charts
from strix_pipeline.analysis.decision import previous_decision
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

    def __init__(self, browser, site: Path, page_file: Path, *, width: int = 390) -> None:
        self.site = site.resolve()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.context = browser.new_context(viewport={"width": width, "height": 800})
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
    # keyboard: the first Tab reaches the skip link, which leads to the answer
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('href')") == "#answer"
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
    # the plumbing is folded: the command line shows once its section is opened
    command = run.page.locator("details", has=run.page.locator("summary", has_text="Command line"))
    assert LLAMA_COMMAND not in command.inner_text()
    command.locator("summary").click()
    assert LLAMA_COMMAND in command.locator("pre").inner_text()
    assert [u for u in run.page.evaluate(ALL_LINKS) if not run.in_site(u.split("#")[0])] == []
    assert run.errors == [] and run.outside == []
    run.close()
    hostile = Visit(browser, tmp_path / "site", tmp_path / "site" / run_page("h1"))
    assert hostile.page.evaluate("document.documentElement.getAttribute('data-pwned')") is None
    assert "onerror=" in hostile.page.locator("main").inner_text()
    assert hostile.errors == [] and hostile.outside == []
    hostile.close()


# ---- layout: the answer first, readable at a desktop's and a phone's width -----------------

WIDTHS = (1280, 390)
# Every element that sticks out of the viewport and is not inside a box that scrolls on its own
# (a wide table of runs or a trend chart may scroll in its box; the page itself never sideways); a
# box in the header or the verdict that scrolls sideways (the answer and its criteria are read whole);
# a criterion row or card whose edge or content leaves the viewport or its own box.
OVERFLOW = """() => {
  const vw = document.documentElement.clientWidth, out = [];
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
      (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : '');
  const inScrollBox = el => {
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(a).overflowX)) return true;
    }
    return false;
  };
  if (document.documentElement.scrollWidth > vw)
    out.push(`document: scrollWidth ${document.documentElement.scrollWidth} > clientWidth ${vw}`);
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('.skip')) continue;  // the skip link waits off screen until it is focused
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;  // not drawn (a closed <details>, a script)
    if ((r.right > vw + 1 || r.left < -1) && !inScrollBox(el))
      out.push(`${name(el)}: ${Math.round(r.left)}..${Math.round(r.right)} outside 0..${vw}`);
  }
  // the answer and its criteria are read without scrolling anything sideways
  for (const el of document.querySelectorAll('header *, #answer, #answer *, #verdict, #verdict *')) {
    const o = getComputedStyle(el).overflowX;
    if (['auto', 'scroll', 'hidden'].includes(o) && el.scrollWidth > el.clientWidth + 1)
      out.push(`${name(el)} in the verdict scrolls sideways: ${el.scrollWidth} in ${el.clientWidth}`);
  }
  for (const row of document.querySelectorAll('[data-criterion]')) {
    const r = row.getBoundingClientRect();
    if (r.right > vw + 1 || r.left < -1)
      out.push(
        `criterion ${row.dataset.criterion}: ${Math.round(r.left)}..${Math.round(r.right)} outside 0..${vw}`);
    for (const cell of row.children) {
      if (cell.scrollWidth > cell.clientWidth + 1)
        out.push(`criterion ${row.dataset.criterion} ${name(cell)}: content ${cell.scrollWidth} `
                 + `wider than ${cell.clientWidth}`);
    }
  }
  return out;
}"""
# where the first screen's parts are: the top of each, in CSS pixels from the top of the page
FIRST_SCREEN = """() => Object.fromEntries(['.answer-word', '#deciding-figure', '#chart-forest svg.marks']
  .map(s => [s, document.querySelector(s) ? document.querySelector(s).getBoundingClientRect().top : -1]))"""
# the y scale resolution of every chart that draws two engines in panels of their own
SHARED_Y = """() => Object.fromEntries(['ttft_p95_by_version', 'memory_held_by_version'].map(n => {
  const s = JSON.parse(document.querySelector(`script.strix-chart[data-target='chart-${n}']`).textContent);
  return [n, s.resolve && s.resolve.scale ? s.resolve.scale.y : 'independent'];
}))"""
HEIGHT = 800  # the viewport's height: the first screen
FOREST_MARKS = """() => {
  const svg = document.querySelector('#chart-forest svg.marks');
  if (!svg) return -1;
  // drawn: marks in a plot of some width (a chart sized to a box of no width draws nothing visible)
  if (svg.getBoundingClientRect().width < 200) return 0;
  return svg.querySelectorAll('.mark-symbol path, .mark-rule line').length;
}"""


@pytest.fixture(scope="module")
def layout_sites(tmp_path_factory) -> dict[str, tuple[Path, list]]:
    """Two reports: the seeded history (a bisected regression, host drift, a verdict that moved) and a
    `make run`-like stay (C3 2.9x, C5 failed); each with its latest decision's criteria."""
    out = {}
    for kind, build in (("history", history_warehouse), ("make_run", make_run_warehouse)):
        root = tmp_path_factory.mktemp(kind)
        wh, cfg = build(root / "w.duckdb")
        with wh:
            write_report(wh, cfg, root / "site", now=REPORT_AT)
            criteria = previous_decision(wh, cfg.decision.host).criteria
        out[kind] = (root / "site", criteria)
    return out


@pytest.mark.chromium
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("kind", ["history", "make_run"])
def test_the_report_reads_at_a_desktops_and_a_phones_width(
    browser, layout_sites, kind: str, width: int
) -> None:
    site, criteria = layout_sites[kind]
    visit = Visit(browser, site, site / "index.html", width=width)
    page = visit.page
    page.wait_for_function(
        "() => [...document.querySelectorAll('script.strix-chart')].every("
        "s => document.getElementById(s.dataset.target).querySelector('svg.marks'))",
        timeout=60_000,
    )
    problems = []
    sentences = page.locator(".verdict-sentence")
    if sentences.count() != 1:
        problems.append(f"{sentences.count()} verdict sentences under the title, not one (one host)")
    else:
        text = sentences.first.inner_text()
        want = {"history": "Not yet: stay on llama-server", "make_run": "Stay: keep llama-server"}[kind]
        if not text.startswith(want):
            problems.append(f"the verdict sentence does not open with {want!r}: {text!r}")
        if kind == "make_run" and "2.9× llama-server's (95 % interval 2.6–3.3×)" not in text:
            problems.append(f"the sentence lacks C3's figure and interval: {text!r}")
    deciding = page.locator("#deciding-figure").inner_text()
    if kind == "make_run" and "95 % interval 2.6–3.3×" not in deciding:
        problems.append(f"the deciding figure lacks its interval: {deciding!r}")
    if kind == "history" and "2.2× llama-server's memory" not in deciding:
        problems.append(f"the deciding figure lacks the memory ratio in words: {deciding!r}")
    for part, top in page.evaluate(FIRST_SCREEN).items():
        if not 0 <= top < HEIGHT:
            problems.append(f"{part} is not on the first screen at {width} px: its top is at {top:.0f}")
    for chart, y in page.evaluate(SHARED_Y).items():
        if y != "shared":
            problems.append(f"{chart}: the engines' panels do not share their y scale ({y})")
    rows = page.locator("[data-criterion]")
    if rows.count() != len(criteria):
        problems.append(f"{rows.count()} criterion rows, not {len(criteria)}")
    for c in criteria:  # each reason in full, inside its own row
        row = page.locator(f"[data-criterion='{c.criterion}']")
        if row.count() == 1 and c.reason not in " ".join(row.inner_text().split()):
            problems.append(f"{c.criterion}'s reason is not shown in full")
    if width < 600 and rows.count():
        shown = page.evaluate(
            "() => [...document.querySelectorAll('[data-criterion]')].map(r => getComputedStyle(r).display)"
        )
        if any(d.startswith("table") for d in shown):
            problems.append(f"at {width} px the criteria are still table rows, not cards: {shown}")
    if kind == "history":  # the seed's bisection and host drift are on the page being measured
        news = page.locator("#changes").inner_text()
        assert DRIFT in news and "server-rocm-b6450" in news
    marks = page.evaluate(FOREST_MARKS)
    if marks <= 0:
        problems.append("the forest plot did not draw" if marks == 0 else "no forest plot (#chart-forest)")
    problems += page.evaluate(OVERFLOW)
    assert visit.errors == [] and visit.outside == []
    visit.close()
    assert problems == [], "\n".join(problems)


# ---- tables: none cut or scrolling sideways; on a phone, cards or a fixed first column ------------

# Each table, every folded section opened (a table in a closed <details> is still read once opened): a
# table outside the viewport, a box around it that scrolls it sideways (on a phone allowed only when its
# first column stays fixed), a cell whose content is wider than the cell or that leaves the viewport;
# on a phone, a table that is still a grid of columns and keeps no column fixed.
TABLES = """(phone) => {
  for (const d of document.querySelectorAll('details')) d.open = true;
  const vw = document.documentElement.clientWidth, out = [];
  const sticky = t => [...t.rows].every(r => !r.cells.length || (
      getComputedStyle(r.cells[0]).position === 'sticky' && getComputedStyle(r.cells[0]).left === '0px'));
  [...document.querySelectorAll('table')].forEach((t, i) => {
    const near = t.closest('details, section, .chart, main, body');
    const heading = near.querySelector('summary, h2, h3');
    const label = `table ${i} (${(heading ? heading.innerText : near.tagName).trim().slice(0, 40)})`;
    const r = t.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) { out.push(`${label}: not drawn`); return; }
    if (r.left < -1 || r.right > vw + 1)
      out.push(`${label}: ${Math.round(r.left)}..${Math.round(r.right)} outside 0..${vw}`);
    for (let a = t.parentElement; a && a !== document.body; a = a.parentElement) {
      const scrolls = ['auto', 'scroll', 'hidden'].includes(getComputedStyle(a).overflowX);
      if (scrolls && a.scrollWidth > a.clientWidth + 1 && !(phone && sticky(t)))
        out.push(`${label} scrolls sideways in its box: ${a.scrollWidth} in ${a.clientWidth}`);
    }
    for (const c of t.querySelectorAll('th, td')) {
      const cr = c.getBoundingClientRect();
      if (cr.width === 0 && cr.height === 0) continue;  // a header row a card layout hides
      const what = `${label} cell '${c.innerText.trim().slice(0, 30)}'`;
      if (c.scrollWidth > c.clientWidth + 1)
        out.push(`${what}: content ${c.scrollWidth} in ${c.clientWidth}`);
      if (cr.left < -1 || cr.right > vw + 1)
        out.push(`${what}: ${Math.round(cr.left)}..${Math.round(cr.right)} outside 0..${vw}`);
    }
    if (phone && getComputedStyle(t).display === 'table' && !sticky(t))
      out.push(`${label}: still columns at ${vw} px, neither cards nor a fixed first column`);
  });
  return out;
}"""


@pytest.fixture(scope="module")
def table_pages(layout_sites, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """The pages holding tables (site, page): each report, a run page of each (one with figures at
    every level and a decision's evidence), and the charts index of the `make run`-like warehouse."""
    pages = {}
    for kind, run in (("history", "llama-qwen"), ("make_run", MAKE_RUN_IDS[0])):
        site, _ = layout_sites[kind]
        pages[f"report-{kind}"] = (site, site / "index.html")
        pages[f"run-{kind}"] = (site, site / run_page(run))
    root = tmp_path_factory.mktemp("charts")
    wh, _ = make_run_warehouse(root / "w.duckdb")
    with wh:
        cs = write_charts(wh, root / "charts", roles={"vllm": "candidate", "llamacpp": "baseline"})
    pages["charts-index"] = (root / "charts", cs.index_html)
    return pages


@pytest.mark.chromium
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "name", ["report-history", "report-make_run", "run-history", "run-make_run", "charts-index"]
)
def test_no_table_is_cut_or_scrolls_sideways(browser, table_pages, name: str, width: int) -> None:
    site, page_file = table_pages[name]
    visit = Visit(browser, site, page_file, width=width)
    page = visit.page
    page.wait_for_function(  # the charts drawn: the page is as wide as it will be
        "() => [...document.querySelectorAll('script.strix-chart')].every("
        "s => document.getElementById(s.dataset.target).querySelector('svg.marks'))",
        timeout=60_000,
    )
    tables = page.locator("table").count()
    problems = page.evaluate(TABLES, width < 600) + page.evaluate(OVERFLOW)
    assert visit.errors == [] and visit.outside == []
    visit.close()
    if name.startswith(("report", "run")):
        assert tables >= 3, f"{name}: {tables} tables: the page measured is not the one meant"
    assert problems == [], f"{name} at {width} px:\n" + "\n".join(problems)
