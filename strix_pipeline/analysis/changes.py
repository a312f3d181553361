"""The warehouse's changes: detected on every series (analysis/changepoints.py), the canary's series read
over time (analysis/canary.py), earlier acknowledgements kept, stored, and read back.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from strix_pipeline.analysis.canary import (
    CANARY_RUNS_AMONG_RELEASES,
    HOST_FACTS,
    DriftWindow,
    as_canary_change,
    canary_noise,
    facts_text,
    label_changes,
    same_release_label,
    time_ordered,
    window_of,
)
from strix_pipeline.analysis.changepoints import Change, changes_in_series
from strix_pipeline.analysis.floor import measured_noise_for
from strix_pipeline.analysis.series import HIGHER_IS_WORSE, Series, load_series
from strix_pipeline.config import ChangeDetectionConfig, StrixConfig
from strix_pipeline.planning.canary import Canary
from strix_pipeline.stats.changepoints import MIN_POINTS
from strix_pipeline.warehouse.changes import ChangeRecord, change_id
from strix_pipeline.warehouse.noise import NoiseRecord
from strix_pipeline.warehouse.series import retire_provisional, run_facts

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

log = logging.getLogger(__name__)


def stored_changes(wh: Warehouse, *, include_acknowledged: bool = True) -> list[Change]:
    """The changes the warehouse holds (for charts and reports without re-detecting)."""
    rows = _existing(wh).values()
    out = []
    for r in rows:
        if not include_acknowledged and r.ack_status == "acknowledged":
            continue
        c = Change(**dataclasses.asdict(r))
        rise = (c.magnitude_pct or 0) > 0
        c.direction = "regression" if rise == HIGHER_IS_WORSE.get(c.metric, True) else "improvement"
        out.append(c)
    return out


def _stored_noise(wh: Warehouse) -> list[NoiseRecord]:
    try:
        return wh.latest_noise()
    except Exception as e:  # noqa: BLE001 - a warehouse without the table yet: nothing measured
        log.warning("could not read the measured noise: %s", e)
        return []


def _canary_of(series: Series, canaries: Sequence[Canary]) -> Canary | None:
    return next((k for k in canaries if (k.host, k.engine) == (series.host, series.engine)), None)


def _existing(wh: Warehouse) -> dict[str, ChangeRecord]:
    try:
        rows = wh.list_changes()
    except Exception as e:  # noqa: BLE001 - a warehouse without the table yet: nothing was acknowledged
        log.warning("could not read existing changes: %s", e)
        return {}
    return {r.change_id: r for r in rows}


def canary_changes(
    wh: Warehouse, series: Series, canary: Canary, cfg: ChangeDetectionConfig, now: datetime
) -> tuple[list[Change], list[DriftWindow]]:
    """The canary's steps over time in one series, as stored changes and as drift windows (a
    provisional step's window labels nothing until the step is confirmed).

    Its floor is the series' own noise, never the measured figure: that figure is these same runs'
    spread, and a step of the host among them would raise the floor over itself.
    """
    points = time_ordered(series.points, canary)
    if len(points) < MIN_POINTS:
        return [], []
    found = changes_in_series(dataclasses.replace(series, points=points), cfg, now=now)
    facts = run_facts(wh, [r for c in found for r in (c.run_id_before, c.run_id_after) if r], HOST_FACTS)
    rows, windows = [], []
    for c in found:
        window = window_of(c, canary, facts_text(facts.get(c.run_id_before), facts.get(c.run_id_after)))
        row = as_canary_change(c, window)
        row.change_id = change_id(row)
        rows.append(row)
        windows.append(window)
    return rows, windows


def detect_changes(
    wh: Warehouse,
    config: StrixConfig,
    *,
    now: datetime | None = None,
    canaries: Sequence[Canary] = (),
) -> list[Change]:
    """Find the changes on every series, keep earlier acknowledgements, save them, return them.

    With ``canaries`` (plan.canaries): each canary's series is also read over time; its steps are
    stored as the canary's changes, and a confirmed one writes its movement beside the engine changes
    on the same measurement whose runs straddle it (``canary_moved``; they stay alerted and bisected:
    analysis/canary.py).
    """
    now = now or datetime.now(UTC)
    cfg = config.change_detection
    previous = _existing(wh)
    changes: list[Change] = []
    own: list[Change] = []
    windows: list[DriftWindow] = []
    noise_rows: list[NoiseRecord] = []
    every = [(s, _canary_of(s, canaries)) for s in load_series(wh)]
    # the canary over time first: its steps are the host's, and its noise figure starts after them
    for series, canary in every:
        if canary is None:
            continue
        rows, found_windows = canary_changes(wh, series, canary, cfg, now)
        own += rows
        windows += found_windows
        since = max((w.start for w in found_windows), default=None)
        if (figure := canary_noise(series, canary, now, after=since)) is not None:
            noise_rows.append(figure)
    # the floors rest on the figures `strix changes` shows after this analysis: its own, else the
    # newest stored (a week whose canary measured nothing keeps last week's)
    figures = noise_rows or _stored_noise(wh)
    for series, canary in every:
        measured = measured_noise_for(series, figures)
        if canary is None:
            changes.extend(changes_in_series(series, cfg, now=now, measured=measured))
            continue
        # the canary's weekly runs are read over time; among the releases it counts as one release
        # with its first two runs (the one that measured it, the repeat that confirms a change on
        # it), not with fifty whose later ones carry the host's drift into the version series
        runs = [p for p in series.points if canary.names(p.version)]
        keep = {id(p) for p in sorted(runs, key=lambda p: p.started_at)[:CANARY_RUNS_AMONG_RELEASES]}
        releases = [p for p in series.points if not canary.names(p.version) or id(p) in keep]
        found = changes_in_series(
            dataclasses.replace(series, points=releases), cfg, now=now, measured=measured
        )
        # a step inside the canary's own release is the over-time reading's, not a version change
        changes += [
            c
            for c in found
            if not (c.version_before == c.version_after and canary.names(c.version_after or ""))
        ]
    label_changes(changes, windows)
    changes += own
    for c in changes:
        old = previous.get(c.change_id)
        if old:
            c.ack_status = old.ack_status or "active"
            c.ack_reason = old.ack_reason
            c.detected_at = old.detected_at or now
        c.newly_confirmed = c.status == "confirmed" and (old is None or old.status != "confirmed")
        if c.status == "confirmed":
            # kept from the first detection that found it confirmed: the alert's clock (see
            # confirmed_since); a change confirmed before schema v5 has none and is not alerted again
            c.confirmed_at = (old.confirmed_at if old and old.status == "confirmed" else None) or (
                now if c.newly_confirmed else None
            )
    # a change kept from an earlier detection (or from before schema v8) between two runs of one
    # release is the host's as much as a new one: labelled the same way
    found_ids = {c.change_id for c in changes}
    kept = [
        dataclasses.replace(r, host_drift=same_release_label(r.version_before))
        for r in previous.values()
        if r.change_id not in found_ids
        and not r.host_drift
        and r.version_before
        and r.version_before == r.version_after
    ]
    if changes or kept:
        wh.save_changes([*changes, *kept])
    wh.save_noise(noise_rows)
    try:
        retire_provisional(wh, [c.change_id for c in changes])
    except Exception as e:  # noqa: BLE001 - the table predates this rule or is read-only: keep the rows
        log.warning("could not retire vanished provisional changes: %s", e)
    return changes
