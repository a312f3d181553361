"""Every page the project writes (the chart pages and their index) shows any string from the warehouse
as text: loaded in a real headless Chromium, no injected script runs and the chart still draws.
And an imported peer run, which has no image version, leaves the support matrix drawable.

The strings arrive the way an attacker's would: through the warehouse's own load functions (an image
label, a failure reason, llama-bench's model type). Each payload, if it ever ran, would set an attribute
on <html>; Chromium's --dump-dom after the page settled shows whether one did.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import need
from support.charts import chart_points
from support.decision_seed import SEPT, run_record, run_result

from strix_pipeline.analysis.charts import (
    support_matrix_chart,
    support_matrix_markdown,
    support_matrix_rows,
    write_charts,
)
from strix_pipeline.outside_text import markdown_text
from strix_pipeline.peers import load_peer_file
from strix_pipeline.warehouse import Warehouse

CHROMIUM = "/usr/bin/chromium"
NO_VERSION = "(no image version)"  # the matrix's label for a run without an image
PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"


def _mark(how: str) -> str:
    return f"document.documentElement.setAttribute('data-pwned','{how}')"


# ends the script the data sits in; an element with an inline handler; an HTML comment opener that puts
# the tokenizer in its "escaped" state; a line separator (a JS string terminator before ES2019)
SCRIPT = f"v1</script><script>{_mark('script')}</script>"
IMG = f'<img src=x onerror="{_mark("img")}">'
SVG = f"<svg onload={_mark('svg')}>"
COMMENT = f"<!--<script>{_mark('comment')}</script>-->"
SEPARATOR = f"a\u2028b'</SCRIPT ><script>{_mark('upper')}</script>"


def hostile_runs() -> list:
    """Four runs, each field a chart shows carrying a payload: a failed run (its reason on the red rule),
    two versions of one series (a trend with a note) and a run whose id is hostile."""
    runs = []
    for i, (version, status) in enumerate([(SCRIPT, "ok"), (IMG, "ok"), (COMMENT, "failed_start")]):
        rec = run_record(
            f"r{i}-{SVG}" if i == 0 else f"r{i}",
            "vllm",
            tag=f"v0.{i}.0",
            version=version,
            sort_key=f"0000{i}",
            quant=SEPARATOR,
            status=status,
            failure_reason=f"{IMG} {SCRIPT}" if status != "ok" else None,
            started_at=SEPT + timedelta(days=i),
            held_gib=30.0 if status == "ok" else None,
        )
        if status == "ok":
            runs.append(
                run_result(rec, ttft5=(500.0, 450.0, 550.0), sweep={1: (200.0, 40.0)}, ladder={512: 900.0})
            )
        else:
            runs.append(run_result(rec, smoke_ok=None))
    # a single-version series: its note ("one version so far") names the host and profile in the index
    lone = run_record(
        "lone", "llamacpp", host=f"box{SCRIPT}", tag="b1", profile=f"p{IMG}", repo="ghcr.io/x/llama"
    )
    runs.append(run_result(lone, ttft5=(40.0, 35.0, 45.0)))
    return runs


def _dom(page: Path, tmp_path: Path) -> str:
    """The page's DOM once its scripts have run (virtual time lets Vega's promises settle first)."""
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / ('profile-' + page.stem)}",
            "--virtual-time-budget=8000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<html" in proc.stdout, f"{page.name}: no DOM dumped\n{proc.stderr[-2000:]}"
    return proc.stdout


def _html_tag(dom: str) -> str:
    found = re.search(r"<html\b[^>]*>", dom)
    assert found, dom[:500]
    return found.group()


@pytest.fixture(scope="module")
def chromium() -> None:
    need(
        Path(CHROMIUM).exists() or shutil.which("chromium") is not None,
        "Chromium",
        "apt-get install chromium",
    )


@pytest.mark.chromium
def test_no_string_from_the_warehouse_runs_as_script_in_any_page(chromium: None, tmp_path: Path) -> None:
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.load_runs(hostile_runs())
        cs = write_charts(wh, tmp_path / "charts")
    pages = sorted((tmp_path / "charts").glob("*.html"))
    assert {p.name for p in pages} == {"index.html"} | {f"{n}.html" for n in cs.charts}
    # the data did reach the pages: a chart that dropped the strings would prove nothing
    matrix = cs.charts["support_matrix"]
    assert not matrix.note, matrix.note
    assert SCRIPT in {p.get("image_version") for p in chart_points(matrix.json)}
    assert "one version so far" in cs.index_html.read_text()

    doms = {page: _dom(page, tmp_path) for page in pages}
    ran = {page.name: _html_tag(dom) for page, dom in doms.items() if "data-pwned" in _html_tag(dom)}
    assert not ran, f"an injected script ran: {ran}"
    for page, dom in doms.items():
        if page.name == "index.html":
            assert "<h1>strix-pipeline: trends" in dom and "support_matrix.png" in dom
            assert "&lt;script&gt;" in dom  # the hostile host name is there, as text
            continue
        # the chart drew: Vega parsed the JSON and rendered its marks as SVG
        assert re.search(r"<svg[^>]*class=\"marks\"", dom), f"{page.name}: no chart drawn"
        spec = re.search(r"<script type=.application/json. id=.strix-chart-spec.>(.*?)</script>", dom, re.S)
        assert spec, f"{page.name}: no spec block"
        assert json.loads(spec.group(1)) == json.loads(cs.charts[page.stem].json.read_text())
    # and the hostile version is a label on the matrix's axis, shown as the text it is
    dom = _dom(matrix.html, tmp_path / "again")
    assert "v1&lt;/script&gt;&lt;script&gt;" in dom


def test_the_vega_libraries_stay_inlined(tmp_path: Path) -> None:
    """The pages open offline (on the Box, no CDN): the library is in the page, not fetched."""
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        cs = write_charts(wh, tmp_path / "charts")
    text = cs.charts["support_matrix"].html.read_text()
    assert len(text) > 500_000 and "window.vegaEmbed=" in text
    assert not re.search(r"<script[^>]+src=", text)
    assert "Content-Security-Policy" in text


def test_an_imported_peer_run_leaves_the_support_matrix_drawable(tmp_path: Path) -> None:
    """An unmodified AIPerf result: no image, so a null image_version, which Altair refused in the sort
    list (SchemaValidationError) and the markdown table tripped over."""
    peer = load_peer_file(PEERS / "aiperf" / "profile_export_aiperf.json")
    assert peer.run.image_version is None
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.load_runs([peer, hostile_runs()[1]])
        chart, note = support_matrix_chart(wh)
        md = support_matrix_markdown(support_matrix_rows(wh))
        cs = write_charts(wh, tmp_path / "charts")
    spec = chart.to_dict()
    assert note == ""
    labels = {p["run_id"]: p["version"] for p in chart_points(spec)}
    assert labels[peer.run.run_id] == NO_VERSION
    assert f"| {markdown_text(NO_VERSION)} |" in md and f"({markdown_text(peer.run.run_id)})" in md
    assert not cs.charts["support_matrix"].note, cs.charts["support_matrix"].note
