"""The report's Atom feed: valid Atom (feedparser, and RFC 4287's required elements checked by hand),
one entry per verdict change, confirmed regression and new support-matrix cell, ids that stay the same
so a second report with nothing new adds no entry, and a warehouse's strings kept as text."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import timedelta
from pathlib import Path

import feedparser
from support.decision_seed import SEPT
from support.report_seed import REPORT_AT, SCRIPT, hostile_runs, report_warehouse

from strix_pipeline.analysis.decision import evaluate
from strix_pipeline.report import FEED_ID, write_report

A = "{http://www.w3.org/2005/Atom}"


def _rfc4287_problems(path: Path) -> list[str]:
    """What RFC 4287 requires that the feed lacks (4.1.1: the feed's id, title, updated, an author
    unless every entry has one, a link rel=self advised; 4.1.2: each entry's id, title, updated and,
    without content, a link rel=alternate)."""
    root = ET.parse(path).getroot()
    problems = []
    if root.tag != f"{A}feed":
        return [f"root is {root.tag}"]
    for tag in ("id", "title", "updated", "author"):
        if root.find(f"{A}{tag}") is None:
            problems.append(f"feed has no {tag}")
    ids = []
    for n, e in enumerate(root.findall(f"{A}entry")):
        for tag in ("id", "title", "updated"):
            if not (e.findtext(f"{A}{tag}") or "").strip():
                problems.append(f"entry {n} has no {tag}")
        if not any(ln.get("rel", "alternate") == "alternate" for ln in e.findall(f"{A}link")):
            problems.append(f"entry {n} has no alternate link")
        ids.append(e.findtext(f"{A}id"))
    if len(ids) != len(set(ids)):
        problems.append(f"entry ids repeat: {ids}")
    return problems


def test_the_feed_is_atom_with_one_entry_per_verdict_change_regression_and_new_cell(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb")
    with wh:
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
    parsed = feedparser.parse(site.feed.read_text())
    assert parsed.bozo == 0, parsed.get("bozo_exception")
    assert parsed.version == "atom10"
    assert parsed.feed.id == FEED_ID
    assert _rfc4287_problems(site.feed) == []
    kinds = sorted(e.tags[0].term for e in parsed.entries)
    # two evaluations (unknown, then evaluate), one confirmed regression, three matrix cells
    assert kinds == ["matrix"] * 3 + ["regression"] + ["verdict"] * 2
    titles = [e.title for e in parsed.entries]
    assert "Verdict on strix-halo: evaluate" in titles and "Verdict on strix-halo: unknown" in titles
    # each verdict entry opens with its evaluation's one sentence: the page's
    summaries = {e.title: e.summary for e in parsed.entries}
    evaluate_sentence = summaries["Verdict on strix-halo: evaluate"].split(" The switch decision")[0]
    assert evaluate_sentence.startswith(
        "Not yet: stay on llama-server for now. vLLM v0.11.0 starts and its TTFT p95 at 5 clients"
    )
    # the page's sentence reads the same once its headline words' emphasis is taken off
    page_text = re.sub(r"</?strong[^>]*>", "", site.index.read_text().replace("&#x27;", "'"))
    assert f">{evaluate_sentence}</p>" in page_text
    assert summaries["Verdict on strix-halo: unknown"].startswith("Can't tell yet: ")
    # the newest first, each at the warehouse's own time (not the report's)
    assert parsed.entries[0].updated == "2026-09-14T06:00:00Z"
    assert all(e.link for e in parsed.entries)


def test_a_second_report_with_nothing_new_adds_no_entry_and_new_cells_add_theirs(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb")
    with wh:
        first = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
        text = first.feed.read_text()
        second = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT + timedelta(days=7))
        assert second.new_entries == []
        assert second.feed.read_text() == text  # the same feed, byte for byte: nothing for a reader to show
        # an evaluation with the same verdict is no entry; a verdict that moves is one
        wh.save_decision(evaluate(wh, cfg, now=REPORT_AT + timedelta(days=7, hours=1)).criteria)
        third = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT + timedelta(days=7, hours=2))
        assert third.new_entries == []
        runs = hostile_runs()
        for r in runs:  # two versions of a third engine, a week later: two new cells of the matrix
            r.run.started_at += timedelta(days=8)
        wh.load_runs(runs)
        fourth = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT + timedelta(days=9))
    assert sorted(e.kind for e in fourth.new_entries) == ["matrix", "matrix"]
    parsed = feedparser.parse(fourth.feed.read_text())
    assert parsed.bozo == 0
    assert {e.id for e in first.entries} < {e.id for e in parsed.entries}


def test_a_warehouse_string_in_the_feed_is_text(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb", hostile=True)
    with wh:
        site = write_report(wh, cfg, tmp_path / "site", now=SEPT + timedelta(hours=5))
    raw = site.feed.read_text()
    assert "<script>" not in raw and "&lt;script&gt;" in raw
    parsed = feedparser.parse(raw)
    assert parsed.bozo == 0, parsed.get("bozo_exception")
    regression = next(e for e in parsed.entries if e.tags[0].term == "regression")
    assert SCRIPT in regression.summary  # parsed back, it is the stored string exactly
    assert _rfc4287_problems(site.feed) == []
