"""Change points per series: E-divisive means with a Student t-test (Apache Otava's algorithm), run on
weekly means.

A series is one fingerprint (everything that must match for two runs to be comparable) plus one
scenario, level and metric, ordered by the image's explicit version sort key -- never by the date the
run happened, so a re-run of an old image lands where that image belongs.

Before detection the runs of one release in one ISO week (UTC) become one point, their mean
(:func:`weekly_means`): a release's repeat runs and the runs of a comparison by pairs count once, with
the noise of one run over sqrt(n). A release measured in two weeks stays two points, so a slow drift
of the host shows as one. A series with fewer than :data:`MIN_POINTS` means is read on its runs, as
E-divisive cannot place a step among two points.

Otava's ``compute_change_points`` is used when it imports (``pip install --no-deps apache-otava``: its
analysis module needs only numpy and scipy). Otherwise a small port of the same split/merge algorithm
runs; ``tests/unit/analysis/test_changepoints_otava.py`` checks the two agree.

A change counts only when the t-test p-value is below ``max_pvalue`` *and* the step is larger than the
floor (:func:`magnitude_floor`): max(min_magnitude_pct, noise_multiple x the noise of one point). That
noise is the measured one when the series' host has a figure for its scenario, level and metric (table
``noise_figures``, the canary's coefficient of variation of one run, divided by sqrt of the median runs
behind a point); otherwise the series' own noise, from the successive differences of its points. Small
steps in noisy series are what false alarms are made of. The canary read over time always uses its own
noise (the figure is its runs' spread), and its figure is taken from the runs after its latest step.
A step found on means must also hold over the runs behind them (the same t-test on the runs), since a
mean hides its runs' disagreement. A change is *provisional* until two runs stand after it (a repeat
run of its version, or the next version).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.stats import ttest_ind_from_stats

from strix_pipeline.analysis import noise
from strix_pipeline.analysis.canary import (
    HOST_FACTS,
    Canary,
    DriftWindow,
    as_canary_change,
    facts_text,
    label_changes,
    same_release_label,
    time_ordered,
    window_of,
)
from strix_pipeline.config import ChangeDetectionConfig, StrixConfig
from strix_pipeline.warehouse.changes import ChangeRecord, change_id
from strix_pipeline.warehouse.noise import NoiseRecord

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

log = logging.getLogger(__name__)

try:  # the heavy extras of apache-otava (BigQuery, Postgres, Slack) are not needed for this module
    from otava.analysis import compute_change_points as _otava_compute

    OTAVA_AVAILABLE = True
except ImportError:  # pragma: no cover - exercised when otava is absent
    _otava_compute = None
    OTAVA_AVAILABLE = False

# Which aggregate columns form series, and whether a rise is bad (latency, memory) or good (throughput).
SERIES_METRICS: dict[str, tuple[tuple[str, bool], ...]] = {
    "concurrency_sweep": (("ttft_p95_ms", True), ("tpot_p95_ms", True), ("output_tokens_per_s", False)),
    "prefill_ladder": (("prefill_tokens_per_s", False),),
    "decode": (("decode_tokens_per_s", False),),
    "prefix_cache": (("ttft_p95_ms", True),),
}
MEMORY_SCENARIO = "memory"  # held_bytes lives on the run, not on an aggregate
HIGHER_IS_WORSE = {m: bad for ms in SERIES_METRICS.values() for m, bad in ms} | {"held_bytes": True}
MIN_POINTS = 3  # a change needs something on both sides and one more point to be tested at all

# Runs that produced numbers (the read model's `usable`); a failed run is a result elsewhere, never a
# point in a trend. A bisection's runs are probes of one release each, not points of the series they
# search (bisection.py): they would move the change they are bisecting.
SERIES_AGGREGATES_SQL = """
SELECT run_id, host, engine, fingerprint, image_version, image_tag, image_digest,
       version_order, started_at, scenario, level,
       ttft_p95_ms, tpot_p95_ms, output_tokens_per_s, prefill_tokens_per_s, decode_tokens_per_s
FROM v_run_aggregates
WHERE usable AND requests_ok > 0 AND run_id NOT IN (SELECT run_id FROM v_bisection_runs)
"""

SERIES_MEMORY_SQL = """
SELECT run_id, host, engine, fingerprint, image_version, image_tag, image_digest,
       version_order, started_at, held_bytes
FROM v_run_base
WHERE usable AND held_bytes IS NOT NULL AND run_id NOT IN (SELECT run_id FROM v_bisection_runs)
"""


@dataclass
class SeriesPoint:
    """One run, or the weekly mean of several runs of one release (:func:`weekly_means`)."""

    run_id: str  # a mean's latest run, so a change's bracketing runs are real runs
    version: str  # what a person calls the image (tag / label), with a digest prefix when ambiguous
    sort_key: str
    started_at: datetime  # when ``run_id`` started
    value: float  # a mean's: the mean of its runs
    run_ids: tuple[str, ...] = ()  # a mean's runs, in series order; () for a single run
    run_values: tuple[float, ...] = ()

    @property
    def n(self) -> int:
        """The runs behind the point."""
        return len(self.run_values) or 1

    @property
    def values(self) -> tuple[float, ...]:
        """The values of the runs behind the point."""
        return self.run_values or (self.value,)


@dataclass
class Series:
    fingerprint: str  # run fingerprint + "/" + scenario, as the `changes` table stores it
    engine: str
    host: str
    scenario: str
    level: int
    metric: str
    points: list[SeriesPoint] = field(default_factory=list)


@dataclass
class ChangePoint:
    """A change found in a plain list of values: index is the first point after the step."""

    index: int
    pvalue: float
    mean_before: float
    mean_after: float

    @property
    def magnitude_pct(self) -> float:
        """Signed relative step, before -> after, in percent."""
        if self.mean_before == 0:
            return 0.0
        return (self.mean_after / self.mean_before - 1.0) * 100.0


@dataclass
class Change(ChangeRecord):
    """One change on one series: the stored row (table ``changes``) and what is not stored."""

    direction: str = "regression"  # "regression" | "improvement"
    run_id_after: str | None = None
    newly_confirmed: bool = False  # confirmed now and was not confirmed in the warehouse before
    # the two runs that bracket the step, and when they ran (host drift is a matter of time)
    run_id_before: str | None = None
    started_before: datetime | None = None
    started_after: datetime | None = None
    bisection: str | None = None  # what its bisection found, in words (notify.regression_alerts)

    @property
    def is_regression(self) -> bool:
        return self.direction == "regression"

    @property
    def is_confirmed_regression(self) -> bool:
        """An engine regression a repeat run or the next version agreed with (not provisional any
        more), and not suspected to be the host's (analysis/canary.py)."""
        return self.status == "confirmed" and self.is_regression and not self.host_drift


# --------------------------------------------------------------------------------------------------
# The algorithm on plain numbers


def series_noise_pct(values: Sequence[float]) -> float:
    """Relative noise of a series in percent, from successive differences.

    Successive differences cancel a step (only one difference sees it) and the median ignores that
    one, so a series with a real change is not judged noisier than it is.
    """
    x = np.asarray(values, dtype=float)
    if len(x) < 3:
        return 0.0
    centre = float(np.median(np.abs(x)))
    if centre == 0:
        return 0.0
    sigma = 1.4826 * float(np.median(np.abs(np.diff(x)))) / math.sqrt(2.0)
    return sigma / centre * 100.0


def floor_pct(noise_pct: float, cfg: ChangeDetectionConfig) -> float:
    """The one rule: the smallest step that counts is max(min_magnitude_pct, noise_multiple x noise)."""
    return max(cfg.min_magnitude_pct, cfg.noise_multiple * noise_pct)


def magnitude_floor_pct(values: Sequence[float], cfg: ChangeDetectionConfig) -> float:
    """The floor of a plain series of values, on their own noise."""
    return floor_pct(series_noise_pct(values), cfg)


MEASURED = "measured"  # the floor rests on the canary's measured CV of one run
OWN = "own"  # on the series' own successive differences


@dataclass(frozen=True)
class Floor:
    """The smallest step that counts on one series, and the noise it rests on."""

    pct: float
    noise_pct: float  # the noise of one point of the series (a weekly mean), in percent
    source: str  # MEASURED | OWN
    runs_per_point: float  # the median runs behind a point

    def text(self) -> str:
        if self.source == MEASURED:
            cv = self.noise_pct * math.sqrt(self.runs_per_point)
            why = f"measured CV {cv:.2f}% of one run / sqrt({self.runs_per_point:g} runs per point)"
        else:
            why = "the series' own noise"
        return f"floor {self.pct:.2f}% (noise {self.noise_pct:.2f}% per point: {why})"


def magnitude_floor(
    points: Sequence[SeriesPoint], cfg: ChangeDetectionConfig, measured_cv: float | None = None
) -> Floor:
    """max(min_magnitude_pct, noise_multiple x the noise of one point).

    ``measured_cv`` (a fraction: 0.05 is 5 %) is the coefficient of variation of one run as the canary
    measured it; a mean of n runs has that over sqrt(n), n being the median runs behind a point.
    Without it, the points' own successive differences are their noise.
    """
    per_point = float(np.median([p.n for p in points])) if points else 1.0
    if measured_cv is not None and math.isfinite(measured_cv) and measured_cv >= 0:
        noise_pct, source = measured_cv * 100.0 / math.sqrt(per_point), MEASURED
    else:
        noise_pct, source = series_noise_pct([p.value for p in points]), OWN
    return Floor(floor_pct(noise_pct, cfg), noise_pct, source, per_point)


def iso_week(at: datetime) -> tuple[int, int]:
    """(ISO year, ISO week) of a moment in UTC; a naive time is taken as UTC."""
    year, week, _ = (at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)).isocalendar()
    return year, week


def weekly_means(points: Sequence[SeriesPoint]) -> list[SeriesPoint]:
    """The runs of one release (its label and its place in the version order) in one ISO week as one
    point, their mean, in the order the points came (first run of each group).

    Repeat runs and a comparison's pairs would otherwise weigh a release by how often it was run, and
    their runs' noise would pass for the series'. Another week stays another point: the host's drift.
    """
    groups: dict[tuple[str, str, tuple[int, int]], list[SeriesPoint]] = {}
    for p in points:
        groups.setdefault((p.version, p.sort_key, iso_week(p.started_at)), []).append(p)
    return [_mean_point(g) for g in groups.values()]


def detection_points(points: Sequence[SeriesPoint]) -> list[SeriesPoint]:
    """What E-divisive reads: the weekly means, or the runs themselves while the means are too few
    for it to place a step at all (two releases, each measured in one week)."""
    means = weekly_means(points)
    return means if len(means) >= MIN_POINTS else list(points)


def _mean_point(group: list[SeriesPoint]) -> SeriesPoint:
    if len(group) == 1:
        return group[0]
    latest = max(group, key=lambda p: p.started_at)
    values = tuple(v for p in group for v in p.values)
    run_ids = tuple(r for p in group for r in (p.run_ids or (p.run_id,)))
    return SeriesPoint(
        latest.run_id, latest.version, latest.sort_key, latest.started_at,
        float(np.mean(values)), run_ids, values,
    )  # fmt: skip


def find_change_points(
    values: Sequence[float],
    *,
    max_pvalue: float = 0.001,
    min_magnitude_pct: float = 2.0,
    use_otava: bool | None = None,
) -> list[ChangePoint]:
    """Change points of one ordered series (E-divisive + t-test), significant and above the floor."""
    x = [float(v) for v in values]
    if len(x) < MIN_POINTS:
        return []
    use = OTAVA_AVAILABLE if use_otava is None else use_otava
    if use:
        if not OTAVA_AVAILABLE:
            raise RuntimeError("apache-otava is not importable: pip install --no-deps apache-otava")
        cps, _ = _otava_compute(
            x, window_len=50, max_pvalue=max_pvalue, min_magnitude=min_magnitude_pct / 100
        )
        return [
            ChangePoint(int(c.index), float(c.stats.pvalue), float(c.stats.mean_1), float(c.stats.mean_2))
            for c in cps
        ]
    return _own_change_points(x, max_pvalue, min_magnitude_pct / 100)


# A port of Otava's split/merge ("Hunter", Fleming et al. 2023) for when otava is not installed. It
# treats the whole series as one window; weekly series are far shorter than Otava's 50-point window.


def _ttest(left: np.ndarray, right: np.ndarray) -> tuple[float, float, float]:
    mean_l, mean_r = float(np.mean(left)), float(np.mean(right))
    std_l = float(np.std(left)) if len(left) >= 2 else 0.0
    std_r = float(np.std(right)) if len(right) >= 2 else 0.0
    if len(left) + len(right) <= 2:
        return 1.0, mean_l, mean_r
    _, p = ttest_ind_from_stats(mean_l, std_l, len(left), mean_r, std_r, len(right))
    p = float(p)
    return (1.0 if math.isnan(p) else p), mean_l, mean_r


def _best_split(z: np.ndarray) -> tuple[int, float]:
    """E-divisive: the tau (and kappa) maximising Q-hat over z[0:tau] vs z[tau:kappa]."""
    n = len(z)
    d = np.abs(z[:, None] - z[None, :])
    s = np.zeros((n + 1, n + 1))
    s[1:, 1:] = d.cumsum(0).cumsum(1)

    def block(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
        return s[a1, b1] - s[a0, b1] - s[a1, b0] + s[a0, b0]

    tau, kappa = np.meshgrid(np.arange(1, n), np.arange(2, n + 1), indexing="ij")
    valid = kappa > tau
    tau_v, kappa_v = tau[valid], kappa[valid]
    zero = np.zeros_like(tau_v)
    cross = block(zero, tau_v, tau_v, kappa_v)
    within_x = block(zero, tau_v, zero, tau_v) / 2
    within_y = block(tau_v, kappa_v, tau_v, kappa_v) / 2
    nx, my, tot = tau_v.astype(float), (kappa_v - tau_v).astype(float), kappa_v.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (
            2 / tot * cross
            - np.where(nx > 1, 2 * my / tot / (nx - 1), 0.0) * within_x
            - np.where(my > 1, 2 * nx / tot / (my - 1), 0.0) * within_y
        )
    i = int(np.argmax(q))
    return int(tau_v[i]), float(q[i])


def _intervals(idx: list[int], n: int) -> list[tuple[int, int]]:
    bounds = [0, *idx, n]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if a != b]


def _own_change_points(x: list[float], max_pvalue: float, min_magnitude: float) -> list[ChangePoint]:
    arr = np.asarray(x, dtype=float)
    n = len(arr)
    first_pass = (
        max_pvalue * 10 if max_pvalue < 0.05 else (max_pvalue * 2 if max_pvalue < 0.5 else max_pvalue)
    )
    # split: keep dividing the interval holding the strongest candidate while the t-test says so
    idx: list[int] = []
    for _ in range(n):
        best: tuple[float, int, int, int] | None = None
        for a, b in _intervals(idx, n):
            if b - a > 1:
                tau, q = _best_split(arr[a:b])
                if best is None or q > best[0]:
                    best = (q, a + tau, a, b)
        if best is None:
            break
        _, cut, a, b = best
        p, _, _ = _ttest(arr[a:cut], arr[cut:b])
        if p > first_pass:
            break
        idx = sorted([*idx, cut])

    def stats(points: list[int]) -> list[ChangePoint]:
        bounds = [0, *points, n]
        out = []
        for k, cut in enumerate(points):
            p, m1, m2 = _ttest(arr[bounds[k] : cut], arr[cut : bounds[k + 2]])
            out.append(ChangePoint(cut, p, m1, m2))
        return out

    def magnitude(c: ChangePoint) -> float:
        fwd = c.mean_after / c.mean_before - 1 if c.mean_before else 0.0
        bwd = c.mean_before / c.mean_after - 1 if c.mean_after else 0.0
        return max(abs(fwd), abs(bwd))

    # merge: drop the weakest point (worst p-value, else smallest step) until all are strong
    cps = stats(idx)
    while cps:
        weakest = max(cps, key=lambda c: c.pvalue)
        if weakest.pvalue < max_pvalue:
            weakest = min(cps, key=magnitude)
            if magnitude(weakest) > min_magnitude:
                break
        cps = stats([c.index for c in cps if c is not weakest])
    return cps


def holds_in_runs(
    points: Sequence[SeriesPoint], cps: list[ChangePoint], max_pvalue: float
) -> list[ChangePoint]:
    """The change points found on means whose step the runs behind the means show too (the same
    t-test, between the same neighbouring change points, on the runs' values).

    A mean hides its runs' disagreement: a blip and a repeat run back at the old figure average to a
    clean step. On single runs this is the test the detection already made, so it is skipped.
    """
    if all(p.n == 1 for p in points):
        return cps
    bounds = [0, *(c.index for c in cps), len(points)]
    kept = []
    for k, c in enumerate(cps):
        before = [v for p in points[bounds[k] : c.index] for v in p.values]
        after = [v for p in points[c.index : bounds[k + 2]] for v in p.values]
        p, _, _ = _ttest(np.asarray(before, dtype=float), np.asarray(after, dtype=float))
        if p < max_pvalue:
            kept.append(c)
        else:
            log.info("step at point %d (%+.1f%%) dropped: its runs do not show it (p=%.2g)", c.index, c.magnitude_pct, p)  # fmt: skip
    return kept


# --------------------------------------------------------------------------------------------------
# Series from the warehouse


def _version_label(version: str | None, tag: str | None, digest: str | None) -> str:
    return version or tag or (digest[:19] if digest else "unknown")


def _disambiguate(points: list[SeriesPoint], digests: list[str | None]) -> None:
    """A floating tag ('latest') names several digests: add the digest so each version is distinct."""
    by_label: dict[str, set[str | None]] = {}
    for p, d in zip(points, digests, strict=True):
        by_label.setdefault(p.version, set()).add(d)
    for p, d in zip(points, digests, strict=True):
        if len(by_label[p.version]) > 1 and d:
            p.version = f"{p.version}@{d.removeprefix('sha256:')[:8]}"


def _sort_key(version_order: str, started_at: datetime) -> tuple[str, datetime]:
    # The read model's version order, and within one version, run order.
    return (version_order, started_at)


def load_series(wh: Warehouse) -> list[Series]:
    """Every series in the warehouse, points in version order."""
    groups: dict[tuple[str, str, int, str], Series] = {}
    raw: dict[tuple[str, str, int, str], list[tuple[tuple[str, datetime], SeriesPoint, str | None]]] = {}

    def add(rec: dict[str, Any], scenario: str, level: int, metric: str, value: float | None) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        key = (rec["fingerprint"], scenario, int(level), metric)
        if key not in groups:
            groups[key] = Series(
                fingerprint=f"{rec['fingerprint']}/{scenario}",
                engine=rec["engine"],
                host=rec["host"],
                scenario=scenario,
                level=int(level),
                metric=metric,
            )
            raw[key] = []
        label = _version_label(rec["image_version"], rec["image_tag"], rec["image_digest"])
        sk = _sort_key(rec["version_order"], rec["started_at"])
        point = SeriesPoint(rec["run_id"], label, sk[0], rec["started_at"], float(value))
        raw[key].append((sk, point, rec["image_digest"]))

    for rec in wh.query_df(SERIES_AGGREGATES_SQL).iter_rows(named=True):
        for metric, _ in SERIES_METRICS.get(rec["scenario"], ()):
            add(rec, rec["scenario"], rec["level"], metric, rec[metric])
    for rec in wh.query_df(SERIES_MEMORY_SQL).iter_rows(named=True):
        add(rec, MEMORY_SCENARIO, 0, "held_bytes", rec["held_bytes"])

    out = []
    for key, series in groups.items():
        entries = sorted(raw[key], key=lambda e: e[0])
        series.points = [e[1] for e in entries]
        _disambiguate(series.points, [e[2] for e in entries])
        out.append(series)
    return out


def measured_noise_for(series: Series, figures: Sequence[NoiseRecord]) -> NoiseRecord | None:
    """The measured figure of the series' host, engine, scenario, level and metric, if any: the one of
    the series' own configuration (its fingerprint: the canary's release with the same flags and
    model) first. Another engine's canary is no figure for it: its noise is that engine's."""
    same = [
        f
        for f in figures
        if (f.host, f.engine, f.scenario, f.level, f.metric)
        == (series.host, series.engine, series.scenario, series.level, series.metric)
    ]
    if not same:
        return None
    return min(same, key=lambda f: f.fingerprint != series.fingerprint)


def changes_in_series(
    series: Series, cfg: ChangeDetectionConfig, *, now: datetime, measured: NoiseRecord | None = None
) -> list[Change]:
    """The changes on one series, found on its weekly means (:func:`detection_points`); ``measured``:
    its noise figure (:func:`measured_noise_for`), which sets the floor when given."""
    points = detection_points(series.points)
    values = [p.value for p in points]
    floor = magnitude_floor(points, cfg, measured.cv if measured else None)
    by = f" (canary {measured.engine} {measured.version})" if floor.source == MEASURED and measured else ""
    log.info(
        "%s %s %s@%d %s: %d points from %d runs, %s%s", series.host, series.engine, series.scenario,
        series.level, series.metric, len(points), len(series.points), floor.text(), by,
    )  # fmt: skip
    cps = find_change_points(values, max_pvalue=cfg.max_pvalue, min_magnitude_pct=floor.pct)
    cps = holds_in_runs(points, cps, cfg.max_pvalue)
    bounds = [c.index for c in cps] + [len(values)]
    out = []
    for k, cp in enumerate(cps):
        before, after = points[cp.index - 1], points[cp.index]
        # the step holds once two runs stand after it (a repeat of that version, or the next
        # version): runs, not points, since one mean of two runs is a repeat already
        confirmed = sum(p.n for p in points[cp.index : bounds[k + 1]]) >= 2
        rise = cp.mean_after > cp.mean_before
        out.append(
            Change(
                change_id="",
                fingerprint=series.fingerprint,
                engine=series.engine,
                host=series.host,
                metric=series.metric,
                scenario=series.scenario,
                level=series.level,
                version_before=before.version,
                version_after=after.version,
                sort_key_after=after.sort_key,
                magnitude_pct=round(cp.magnitude_pct, 3),
                pvalue=cp.pvalue,
                status="confirmed" if confirmed else "provisional",
                ack_status="active",
                ack_reason=None,
                detected_at=now,
                direction="regression" if rise == HIGHER_IS_WORSE.get(series.metric, True) else "improvement",
                run_id_after=after.run_id,
                run_id_before=before.run_id,
                started_before=before.started_at,
                started_after=after.started_at,
            )
        )
    for c in out:
        # the warehouse's id: stable across re-detection, so an acknowledgement survives next week
        c.change_id = change_id(c)
    return out


# A provisional change that the next run did not repeat was a blip: it goes. Confirmed or acknowledged
# ones stay as history even when a later detection no longer reports them.
RETIRE_PROVISIONAL_SQL = """
DELETE FROM changes
WHERE status = 'provisional' AND ack_status = 'active' AND NOT list_contains(?, change_id)
"""


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


def confirmed_since(changes: list[Change], since: datetime | None, until: datetime) -> list[Change]:
    """The changes whose confirmation happened in (since, until]: marked ``newly_confirmed``.

    What the switch decision alerts on: the regressions confirmed after the previous evaluation (any
    confirmed one when there was none) and not after this one. Computed from the stored
    ``confirmed_at``, so it crosses the asset boundary (regressions -> switch_decision) and a replay of
    an evaluation finds the same ones.
    """
    out = []
    for c in changes:
        at = c.confirmed_at
        c.newly_confirmed = (
            c.status == "confirmed" and at is not None and (since is None or at > since) and at <= until
        )
        if c.newly_confirmed:
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


CANARY_RUNS_AMONG_RELEASES = 2
# A series' noise figure is its canary's latest runs of the one release: enough for a spread, recent
# enough to be this host's noise as it stands
NOISE_RUNS = 10
NOISE_MIN_RUNS = 3
RUN_FACTS_SQL = f"SELECT run_id, {', '.join(HOST_FACTS)} FROM runs WHERE list_contains(?, run_id)"


def _run_facts(wh: Warehouse, run_ids: list[str]) -> dict[str, dict]:
    if not run_ids:
        return {}
    return {r["run_id"]: r for r in wh.query_df(RUN_FACTS_SQL, [run_ids]).iter_rows(named=True)}


def canary_changes(
    wh: Warehouse, series: Series, canary: Canary, cfg: ChangeDetectionConfig, now: datetime
) -> tuple[list[Change], list[DriftWindow]]:
    """The canary's steps over time in one series, as stored changes and as drift windows.

    Its floor is the series' own noise, never the measured figure: that figure is these same runs'
    spread, and a step of the host among them would raise the floor over itself.
    """
    points = time_ordered(series.points, canary)
    if len(points) < MIN_POINTS:
        return [], []
    found = changes_in_series(dataclasses.replace(series, points=points), cfg, now=now)
    facts = _run_facts(wh, [r for c in found for r in (c.run_id_before, c.run_id_after) if r])
    rows, windows = [], []
    for c in found:
        window = window_of(c, canary, facts_text(facts.get(c.run_id_before), facts.get(c.run_id_after)))
        row = as_canary_change(c, window)
        row.change_id = change_id(row)
        rows.append(row)
        windows.append(window)
    return rows, windows


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
        computed_at, series.host, series.engine, canary.version, series.fingerprint, series.scenario,
        series.level, series.metric, fig.n, fig.mean, fig.cv, *fig.steps, [p.run_id for p in points],
    )  # fmt: skip


def detect_changes(
    wh: Warehouse,
    config: StrixConfig,
    *,
    now: datetime | None = None,
    canaries: Sequence[Canary] = (),
) -> list[Change]:
    """Find the changes on every series, keep earlier acknowledgements, save them, return them.

    With ``canaries`` (plan.canaries): each canary's series is also read over time; its steps are
    stored as the canary's changes and label the other changes they explain "host drift suspected"
    (analysis/canary.py).
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
        changes += [c for c in found if not (c.version_before == c.version_after and canary.names(c.version_after or ""))]  # fmt: skip
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
        # a sentinel keeps the list typed when nothing was found
        wh.con.execute(RETIRE_PROVISIONAL_SQL, [[c.change_id for c in changes] or [""]]).fetchall()
    except Exception as e:  # noqa: BLE001 - the table predates this rule or is read-only: keep the rows
        log.warning("could not retire vanished provisional changes: %s", e)
    return changes
