"""Strings from outside go into the Dagster UI's Markdown as text: an engine name, an image version, a
run id or a reason from the warehouse (a server's error, an imported file's label) never renders as a
link, a remote image, HTML or a code span, and never splits a table's row. Rendered here with
markdown-it (CommonMark with GFM tables), as the UI would."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from markdown_it import MarkdownIt

from assets.analysis import noise_markdown
from strix_pipeline.analysis.charts import support_matrix_markdown
from strix_pipeline.outside_text import markdown_text
from strix_pipeline.warehouse import NoiseRecord

HOSTILE = [
    "[click](https://evil.example/login)",
    "![x](https://evil.example/pixel.png)",
    "<img src=https://evil.example/p.png onerror=alert(1)>",
    "<https://evil.example/>",
    "https://evil.example/ and www.evil.example",
    "a | b | c",
    "`code` and ``more``",
    "line\nbreak\r\x1b]8;;https://evil.example/\x1b\\",
    "# heading",
    "- item",
    "1. item",
    "> quote",
    "**bold** _it_ ~~gone~~ &amp; &#x3C;",
    "back\\slash\\",
]


def _html(md: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(md)


def _plain(html: str) -> str:
    """The text a reader sees of rendered ``html`` (its tags gone, its entities read)."""
    text = re.sub(r"<[^>]+>", "", html)
    for entity, ch in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&amp;", "&")):
        text = text.replace(entity, ch)
    return text


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_text_renders_as_itself(text: str) -> None:
    html = _html(f"x {markdown_text(text)}")
    # one paragraph, no markup at all in it: no link, image, HTML, code, emphasis, heading or list
    assert re.fullmatch(r"<p>[^<]*</p>\n", html), html
    shown = text.replace("\n", "\\n").replace("\r", "\\r").replace("\x1b", "\\x1b")
    assert _plain(html) == f"x {shown}\n"
    # and at the start of a line too (a chart's note stands alone)
    assert re.fullmatch(r"<p>[^<]*</p>\n", _html(markdown_text(text))), _html(markdown_text(text))


def _cell(**kw: Any) -> dict[str, Any]:
    row = {
        "host": "local",
        "engine": "vllm",
        "image_version": "v1",
        "version_rank": 1,
        "model_profile": "qwen",
        "outcome": "fails",
        "status": "failed",
        "reason": "no reason",
        "run_id": "r1",
        "attempts": 1,
        "attempts_served": 0,
    }
    return row | kw


def test_the_support_matrix_shows_the_warehouse_strings_as_text() -> None:
    rows = [
        _cell(
            host=HOSTILE[0],
            engine=HOSTILE[1],
            image_version=HOSTILE[5],
            model_profile=HOSTILE[6],
            reason=HOSTILE[2],
            run_id=HOSTILE[4] + " " + HOSTILE[3],
        ),
        _cell(
            host=HOSTILE[0],
            engine="e2",
            model_profile=HOSTILE[6],
            run_id="[y](javascript:alert(1))",
            reason=HOSTILE[7],
            version_rank=2,
        ),
    ]
    html = _html(support_matrix_markdown(rows))
    for tag in ("<a ", "<img", "<code", "<h1", "<li", "<blockquote"):
        assert tag not in html, html
    body = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    assert len(body) == 3  # the header and two rows, each of three columns
    assert all(row.count("<td>") + row.count("<th>") == 3 for row in body), body
    text = _plain(html)
    assert "![x](https://evil.example/pixel.png)" in text and "<img src=" in text and "a | b | c" in text


def test_the_regressions_metadata_shows_the_warehouse_strings_as_text() -> None:
    noise = NoiseRecord(
        computed_at=datetime(2026, 12, 1, tzinfo=UTC),
        host=HOSTILE[0],
        engine=HOSTILE[1],
        version=HOSTILE[5],
        fingerprint="f",
        scenario=HOSTILE[2],
        level=5,
        metric="ttft_p95_ms",
        runs=3,
        mean=100.0,
        cv=0.02,
        step_3_pairs=0.1,
        step_5_pairs=0.08,
        step_10_pairs=0.05,
        run_ids=["r1"],
    )
    html = _html(noise_markdown([noise]))
    assert "<a " not in html and "<img" not in html
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    assert len(rows) == 2 and rows[1].count("<td>") == 6, rows
