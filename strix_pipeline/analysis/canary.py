"""Host drift apart from engine change: the canary's series over time, and the windows it marks.

The canary is one pinned build (``[analysis] canary``) benchmarked every week. Its engine never
changes, so a step in its figures over *time* is the host's: a kernel or firmware setting outside the
fingerprint, a BIOS option, a neighbour on shared hardware, thermal limits. Every other change whose
two bracketing runs straddle that step -- the before-run ran before the canary's step, the after-run
after it -- is labelled "host drift suspected" and is not alerted as an engine regression. A change
between two runs of one and the same release is the host's by definition and is labelled so too.

Pure: series and changes in, labels and noise figures out (analysis/changes.py wires it to the warehouse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from strix_pipeline.analysis import noise
from strix_pipeline.planning.canary import Canary
from strix_pipeline.warehouse.noise import NoiseRecord

if TYPE_CHECKING:
    from strix_pipeline.analysis.series import Series

# The run facts a person checks beside a canary's change: the fingerprint's host fields (a change of
# any of them starts a new series, so here they confirm the host *looked* the same) and the measured
# memory bandwidth, which does move with the host.
HOST_FACTS = (
    "kernel",
    "kernel_cmdline",
    "ttm_pages_limit",
    "firmware",
    "rocm_version",
    "bandwidth_bytes_per_s",
)


@dataclass(frozen=True)
class DriftWindow:
    """When the canary's figures stepped: between its run at ``start`` and its run at ``end``."""

    canary: Canary
    metric: str
    scenario: str
    level: int
    magnitude_pct: float
    start: datetime
    end: datetime
    facts: str  # the host facts before -> after, in words

    def overlaps(self, before: datetime, after: datetime) -> bool:
        """The time between two runs meets this window (start, end]: the host changed between them.
        In version order the before-run may have run later than the after-run (a re-run of an old
        release): the span is between the two, whichever ran first."""
        first, last = min(before, after), max(before, after)
        return first < self.end and self.start < last

    def label(self) -> str:
        return (
            f"host drift suspected: canary {self.canary} {self.scenario}@{self.level} {self.metric} "
            f"{self.magnitude_pct:+.1f}% between {self.start:%Y-%m-%d %H:%M} and {self.end:%Y-%m-%d %H:%M} "
            f"UTC ({self.facts})"
        )


def facts_text(before: dict | None, after: dict | None) -> str:
    """The host facts of the canary's two runs, the ones that moved first."""
    if not before or not after:
        return "host facts not recorded"

    def show(key: str, v: object) -> str:
        if v is None:
            return "?"
        if key == "bandwidth_bytes_per_s":
            return f"{float(v) / 1e9:.1f} GB/s"  # type: ignore[arg-type]
        return str(v)

    moved = [k for k in HOST_FACTS if before.get(k) != after.get(k)]
    same = [k for k in HOST_FACTS if k not in moved and before.get(k) is not None]
    parts = [f"{k} {show(k, before.get(k))} → {show(k, after.get(k))}" for k in moved]
    parts += [f"{k} {show(k, before.get(k))}" for k in same]
    return "host facts: " + ("; ".join(parts) if parts else "none recorded")


def same_release_label(version: str) -> str:
    return f"host drift suspected: the change lies between two runs of one release ({version})"


def label_changes(changes: list, windows: list[DriftWindow]) -> None:
    """Set ``host_drift`` on the changes (``analysis.changepoints.Change``) the windows explain: same
    host, and the change's before/after runs straddle the canary's step. A change already labelled
    (the canary's own, or one inside one release) keeps its label."""
    for c in changes:
        if c.host_drift:
            continue
        if c.version_before is not None and c.version_before == c.version_after:
            c.host_drift = same_release_label(c.version_before)
            continue
        if c.started_before is None or c.started_after is None:
            continue
        for w in windows:
            if w.canary.host == c.host and w.overlaps(c.started_before, c.started_after):
                c.host_drift = w.label()
                break


def time_ordered(points: list, canary: Canary) -> list:
    """The canary's points of one series, in the order they ran (not in version order)."""
    return sorted((p for p in points if canary.names(p.version)), key=lambda p: p.started_at)


def window_of(change, canary: Canary, facts: str) -> DriftWindow:
    return DriftWindow(
        canary=canary,
        metric=change.metric,
        scenario=change.scenario,
        level=change.level,
        magnitude_pct=change.magnitude_pct or 0.0,
        start=change.started_before,
        end=change.started_after,
        facts=facts,
    )


def as_canary_change(change, window: DriftWindow):
    """The canary's own change, stored beside the others: keyed by the time of its step (its
    version never changes) and labelled as the canary's, so it is never alerted."""
    return replace(
        change,
        fingerprint=change.fingerprint,
        sort_key_after=f"canary@{window.end.isoformat()}",
        host_drift=f"canary: {window.label().removeprefix('host drift suspected: canary ')}",
    )


# Among the releases the canary counts as one release with its first runs (analysis/changes.py)
CANARY_RUNS_AMONG_RELEASES = 2
# A series' noise figure is its canary's latest runs of the one release: enough for a spread, recent
# enough to be this host's noise as it stands
NOISE_RUNS = 10
NOISE_MIN_RUNS = 3


def canary_noise(
    series: Series, canary: Canary, computed_at: datetime, *, after: datetime | None = None
) -> NoiseRecord | None:
    """The series' run-to-run noise from its canary's latest runs of the one release (the points a
    step over time would be the host's, not an engine's); None below :data:`NOISE_MIN_RUNS`.

    ``after``: the start of the canary's latest step over time. Only the runs after it are the host
    as it stands; with the step among them the spread is the step's, and the floors that rest on the
    figure would hide steps of that size.
    """
    runs = [p for p in time_ordered(series.points, canary) if after is None or p.started_at > after]
    points = runs[-NOISE_RUNS:]
    if len(points) < NOISE_MIN_RUNS:
        return None
    fig = noise.noise_figure(series.metric, [p.value for p in points])
    if fig is None or not math.isfinite(fig.cv):
        return None
    return NoiseRecord(
        computed_at,
        series.host,
        series.engine,
        canary.version,
        series.fingerprint,
        series.scenario,
        series.level,
        series.metric,
        fig.n,
        fig.mean,
        fig.cv,
        *fig.steps,
        [p.run_id for p in points],
    )
