"""Host drift apart from engine change: the canary's series over time, and the windows it marks.

The canary is one pinned build (``[analysis] canary``) benchmarked every week. Its engine never
changes, so a step in its figures over *time* is the host's: a kernel or firmware setting outside the
fingerprint, a BIOS option, a neighbour on shared hardware, thermal limits. A *confirmed* step (two
runs stand after it) opens a drift window; a provisional one, a single run away from its past, opens
none. A window covers the canary's own measurement (host, scenario, level, metric) and the metrics
declared to move with it (:data:`MOVES_WITH`), nothing else on the host. An engine change whose two
bracketing runs straddle the step is still an engine change -- alerted and bisected -- with the
canary's movement written beside it (``canary_moved``): a window that silenced every change on the
host let a few false canary steps (one of some twenty series) swallow a quarter of the weeks. A change
between two runs of one and the same release is the host's by definition and is labelled "host drift
suspected" (never alerted).

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


# Metrics that move together with a canary's metric in the same scenario and level, so that its window
# covers them too. Declared, not measured: a correlation estimated from the canary's ten-odd weekly
# runs is itself noisy, and over some twenty series chance correlations would widen windows again.
# A pair belongs here only when both figures come from the same timestamps of the same requests:
# the sweep's output throughput is its output tokens over a span spent mostly decoding (256 output
# tokens a request), which is what TPOT times. TTFT (prefill and queueing) moves on its own.
MOVES_WITH: dict[tuple[str, str], frozenset[str]] = {
    ("concurrency_sweep", "tpot_p95_ms"): frozenset({"output_tokens_per_s"}),
    ("concurrency_sweep", "output_tokens_per_s"): frozenset({"tpot_p95_ms"}),
}


def covered_metrics(scenario: str, metric: str) -> frozenset[str]:
    """The metrics a canary step on ``metric`` speaks for: itself and those declared to move with it."""
    return frozenset({metric}) | MOVES_WITH.get((scenario, metric), frozenset())


@dataclass(frozen=True)
class DriftWindow:
    """When the canary's figures stepped: between its run at ``start`` and its run at ``end``.
    ``confirmed``: the step stands on two runs after it; only then does it label other changes."""

    canary: Canary
    metric: str
    scenario: str
    level: int
    magnitude_pct: float
    start: datetime
    end: datetime
    facts: str  # the host facts before -> after, in words
    confirmed: bool = True

    def overlaps(self, before: datetime, after: datetime) -> bool:
        """The time between two runs meets this window (start, end]: the host changed between them.
        In version order the before-run may have run later than the after-run (a re-run of an old
        release): the span is between the two, whichever ran first."""
        first, last = min(before, after), max(before, after)
        return first < self.end and self.start < last

    def covers(self, change) -> bool:
        """The change (``analysis.changepoints.Change``) is the canary's measurement on its host, or
        one declared to move with it, and its two runs straddle the step."""
        return (
            self.confirmed
            and change.host == self.canary.host
            and change.scenario == self.scenario
            and change.level == self.level
            and change.metric in covered_metrics(self.scenario, self.metric)
            and change.started_before is not None
            and change.started_after is not None
            and self.overlaps(change.started_before, change.started_after)
        )

    def movement(self) -> str:
        return (
            f"canary {self.canary} {self.scenario}@{self.level} {self.metric} {self.magnitude_pct:+.1f}% "
            f"between {self.start:%Y-%m-%d %H:%M} and {self.end:%Y-%m-%d %H:%M} UTC ({self.facts})"
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
    """Label the changes (``analysis.changepoints.Change``): one between two runs of one release is the
    host's (``host_drift``, never alerted); one a confirmed canary window covers keeps being an engine
    change -- alerted, bisected -- with the canary's movement beside it (``canary_moved``). A change
    already labelled the host's (the canary's own) keeps its label."""
    for c in changes:
        if c.host_drift:
            continue
        if c.version_before is not None and c.version_before == c.version_after:
            c.host_drift = same_release_label(c.version_before)
            continue
        moved = [w.movement() for w in windows if w.covers(c)]
        c.canary_moved = "; ".join(moved) if moved else None


def time_ordered(points: list, canary: Canary) -> list:
    """The canary's points of one series, in the order they ran (not in version order)."""
    return sorted((p for p in points if canary.names(p.version)), key=lambda p: p.started_at)


def window_of(change, canary: Canary, facts: str) -> DriftWindow:
    """The window of one of the canary's steps over time; it labels others once the step is confirmed."""
    return DriftWindow(
        canary=canary,
        metric=change.metric,
        scenario=change.scenario,
        level=change.level,
        magnitude_pct=change.magnitude_pct or 0.0,
        start=change.started_before,
        end=change.started_after,
        facts=facts,
        confirmed=change.status == "confirmed",
    )


def as_canary_change(change, window: DriftWindow):
    """The canary's own change, stored beside the others: keyed by the time of its step (its
    version never changes) and labelled as the canary's, so it is never alerted."""
    return replace(
        change,
        fingerprint=change.fingerprint,
        sort_key_after=f"canary@{window.end.isoformat()}",
        host_drift=f"canary: {window.movement().removeprefix('canary ')}",
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
