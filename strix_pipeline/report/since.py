"""What changed since the last report: the last one left what it saw in ``report.json`` beside its
pages; without one (the first report) the window is the week before it."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from strix_pipeline.analysis.changepoints import Change
from strix_pipeline.report.names import STATE
from strix_pipeline.report.site_data import ReportData
from strix_pipeline.safe_write import write_file

log = logging.getLogger(__name__)

FIRST_WINDOW = timedelta(days=7)
USABLE = ("ok", "partial")


@dataclass
class Seen:
    """What one report saw (its ``report.json``)."""

    as_of: str  # ISO time
    evaluation_id: str | None = None
    verdict: str | None = None
    statuses: dict[str, str] = field(default_factory=dict)  # criterion -> status
    run_ids: list[str] = field(default_factory=list)
    change_ids: list[str] = field(default_factory=list)  # confirmed ones
    entry_ids: list[str] = field(default_factory=list)


def seen_now(data: ReportData, entry_ids: list[str]) -> Seen:
    d = data.decision
    return Seen(
        as_of=data.as_of.isoformat(),
        evaluation_id=d.evaluation_id if d else None,
        verdict=d.label if d else None,
        statuses={c.criterion: c.status for c in d.criteria} if d else {},
        run_ids=[r["run_id"] for r in data.runs],
        change_ids=sorted(c.change_id for c in data.changes if c.status == "confirmed"),
        entry_ids=entry_ids,
    )


def read_seen(out_dir: Path) -> Seen | None:
    """The last report's state in ``out_dir``; None when there is none, or it is unreadable (said)."""
    path = out_dir / STATE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        return Seen(**{k: raw[k] for k in Seen.__dataclass_fields__ if k in raw})
    except (ValueError, TypeError, KeyError) as e:
        log.warning("%s: not a report state (%s); this report compares with the week before it", path, e)
        return None


def write_seen(out_dir: Path, seen: Seen) -> None:
    # no link followed (an earlier report's folder may hold one): strix_pipeline.safe_write
    text = json.dumps(asdict(seen), indent=1).encode()
    write_file(out_dir / STATE, lambda f: f.write(text))


@dataclass
class Since:
    """The news: what is new against the last report (or the week before the first)."""

    label: str  # "since the report of …" / "in the 7 days before this first report"
    start: datetime | None
    verdict_before: str | None
    criteria_changed: list[tuple[str, str, str]]  # (criterion, before, now)
    new_versions: list[dict[str, Any]]  # first run of each (host, engine, version) that is new
    failed_runs: list[dict[str, Any]]
    regressions: list[Change]
    improvements: list[Change]
    drift: list[Change]


def _new_runs(data: ReportData, seen: Seen | None, start: datetime) -> list[dict[str, Any]]:
    if seen is not None:
        old = set(seen.run_ids)
        return [r for r in data.runs if r["run_id"] not in old]
    return [r for r in data.runs if r["started_at"] > start]


def _new_changes(data: ReportData, seen: Seen | None, start: datetime) -> list[Change]:
    confirmed = [c for c in data.changes if c.status == "confirmed"]
    if seen is not None:
        old = set(seen.change_ids)
        return [c for c in confirmed if c.change_id not in old]
    return [c for c in confirmed if (c.confirmed_at or c.detected_at) > start]


def since_last(data: ReportData, seen: Seen | None, zone_label: str) -> Since:
    """What changed against ``seen`` (the last report), or in the week before a first report."""
    if seen is not None:
        start = datetime.fromisoformat(seen.as_of)
        label = f"since the last report ({zone_label})"
    else:
        start = data.as_of - FIRST_WINDOW
        label = "in the 7 days before this first report"
    d, p = data.decision, data.previous
    if seen is not None:
        verdict_before, before = seen.verdict, seen.statuses
    else:
        verdict_before = p.label if p else None
        before = {c.criterion: c.status for c in p.criteria} if p else {}
    now = {c.criterion: c.status for c in d.criteria} if d else {}
    criteria = [(k, before[k], v) for k, v in sorted(now.items()) if before.get(k, v) != v]
    runs = _new_runs(data, seen, start)
    fresh = {r["run_id"] for r in runs}
    known = {(r["host"], r["engine"], r["image_version"]) for r in data.runs if r["run_id"] not in fresh}
    versions: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in runs:
        key = (r["host"], r["engine"], r["image_version"])
        if key not in known:
            versions.setdefault(key, r)
    changes = _new_changes(data, seen, start)
    drifting = {cid for cid, x in data.extras.items() if x.host_drift}
    return Since(
        label=label,
        start=start,
        verdict_before=verdict_before,
        criteria_changed=criteria,
        new_versions=list(versions.values()),
        failed_runs=[r for r in runs if r["status"] not in USABLE],
        regressions=[c for c in changes if c.is_regression and c.change_id not in drifting],
        improvements=[c for c in changes if not c.is_regression and c.change_id not in drifting],
        drift=[c for c in changes if c.change_id in drifting],
    )
