"""The Atom feed (RFC 4287): one entry per verdict change, confirmed regression and new support-matrix
cell. Each entry's id and time come from the warehouse, never from the moment the report is written:
the same warehouse gives the same feed, so a reader shows each entry once."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime

from strix_pipeline.report.markup import local_time
from strix_pipeline.report.names import FEED, INDEX, run_page, stable_key
from strix_pipeline.report.site_data import ReportData, verdict_changes

ATOM = "http://www.w3.org/2005/Atom"
FEED_ID = "tag:strix-pipeline,2026:weekly-report"
# characters XML 1.0 cannot carry at all (not even escaped): shown as their escapes instead
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


@dataclass(frozen=True)
class Entry:
    kind: str  # "verdict" | "regression" | "matrix"
    key: str  # stable within its kind
    title: str
    updated: datetime
    summary: str
    link: str  # a file of the site (with an anchor)

    @property
    def id(self) -> str:
        return f"tag:strix-pipeline,2026:{self.kind}/{self.key}"


def _utc(t: datetime) -> datetime:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def verdict_entries(data: ReportData) -> list[Entry]:
    """One entry per verdict change; its summary is the evaluation's one sentence where the warehouse
    still holds its criteria."""
    out: list[Entry] = []
    for e, before in verdict_changes(data.evaluations):
        moved = f"moved from {before} to {e.label}" if before else f"gave its first verdict, {e.label}"
        sentence = data.sentences.get(e.evaluation_id)
        out.append(
            Entry(
                "verdict",
                stable_key(e.evaluation_id),
                f"Verdict on {e.host}: {e.label}",
                _utc(e.evaluated_at),
                (f"{sentence} " if sentence else "")
                + f"The switch decision on host {e.host} {moved} (evaluation {e.evaluation_id}).",
                f"{INDEX}#verdict",
            )
        )
    return out


def regression_entries(data: ReportData) -> list[Entry]:
    out = []
    for c in data.changes:
        extras = data.extras.get(c.change_id)
        if not c.is_confirmed_regression or (extras and extras.host_drift):  # the host's: not an engine's
            continue
        bisected = (
            f"; first release showing it: {extras.bisected_release}"
            if extras and extras.bisected_release
            else ""
        )
        size = f"{c.magnitude_pct:+.1f} %" if c.magnitude_pct is not None else "a step"
        out.append(
            Entry(
                "regression",
                stable_key(c.change_id),
                f"Regression: {c.engine} {c.metric} {size} at {c.version_after}",
                _utc(c.confirmed_at or c.detected_at),
                f"{c.engine} on {c.host}, {c.scenario} at {c.level}: {c.metric} {size} from "
                f"{c.version_before} to {c.version_after}{bisected} (change {c.change_id})"
                + (f"; beside it: {c.canary_moved}." if c.canary_moved else "."),
                f"{INDEX}#changes",
            )
        )
    return out


def matrix_entries(data: ReportData) -> list[Entry]:
    now = {(r["host"], r["engine"], r["image_version"], r["model_profile"]): r for r in data.matrix}
    out = []
    for key, first in data.cells_first_run.items():
        host, engine, version, profile = key
        row = now.get(key)
        outcome = row["outcome"].replace("_", " ") if row else "tried"
        link = run_page(row["run_id"]) if row else f"{INDEX}#matrix"
        out.append(
            Entry(
                "matrix",
                stable_key(*key),
                f"Support matrix: {engine} {version} × {profile} on {host}",
                _utc(first),
                f"New cell in the support matrix: {engine} {version} with {profile} on {host}, "
                f"first tried {local_time(first, data.timezone)}; now: {outcome}.",
                link,
            )
        )
    return out


def feed_entries(data: ReportData) -> list[Entry]:
    """Every entry, newest first (ties by id: the order is the warehouse's, not the run's)."""
    entries = verdict_entries(data) + regression_entries(data) + matrix_entries(data)
    return sorted(entries, key=lambda e: (e.updated, e.id), reverse=True)


def _text(value: str) -> str:
    return _NOT_XML.sub(lambda m: ascii(m.group())[1:-1], value)


def _stamp(t: datetime) -> str:
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def feed_xml(entries: list[Entry], *, title: str, updated: datetime) -> str:
    """The feed as Atom XML; ElementTree escapes every value (a '<' from the warehouse stays text)."""
    ET.register_namespace("", ATOM)

    def add(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
        el = ET.SubElement(parent, f"{{{ATOM}}}{tag}", {k: _text(v) for k, v in attrs.items()})
        if text is not None:
            el.text = _text(text)
        return el

    root = ET.Element(f"{{{ATOM}}}feed")
    add(root, "id", FEED_ID)
    add(root, "title", title)
    add(root, "updated", _stamp(max([e.updated for e in entries], default=updated)))
    add(add(root, "author"), "name", "strix-pipeline")
    add(root, "link", rel="alternate", type="text/html", href=INDEX)
    add(root, "link", rel="self", type="application/atom+xml", href=FEED)
    add(root, "generator", "strix-pipeline weekly report")
    for e in entries:
        el = add(root, "entry")
        add(el, "id", e.id)
        add(el, "title", e.title)
        add(el, "updated", _stamp(e.updated))
        add(el, "link", rel="alternate", type="text/html", href=e.link)
        add(el, "category", term=e.kind)
        add(el, "summary", e.summary, type="text")
    ET.indent(root)
    return "<?xml version='1.0' encoding='utf-8'?>\n" + ET.tostring(root, encoding="unicode") + "\n"
