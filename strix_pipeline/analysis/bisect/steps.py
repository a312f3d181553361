"""Bisection against the warehouse: a confirmed change's brackets, the releases between, each step.

The search itself is analysis/bisect/search.py (pure); the releases between the brackets are
analysis/bisect/releases.py's. Here: a confirmed change's series and brackets, the figure of each run
with its interval, and the stored state (warehouse/bisections.py). A bisection the pairs method can run
here (runner/pair_bisect.can_bisect) waits for its pair job (``next_key`` starts ``BY_PAIRS``): fresh
pairs decide it, never the stored runs. Otherwise one step = one benchmark run of the release
``next_key`` names (a partition of ``benchmark_run``): the Dagster layer runs it (job ``bisect_job``,
requested by ``bisect_sensor``, or `strix bisect` by hand), then :func:`advance` reads the run, puts it
on a side and names the next release, until the first release that shows the change is found, the
search is inconclusive, or ``[analysis] bisect_max_runs`` runs are spent.

A figure's interval: TTFT p95 has its own distribution-free interval (loadgen/metrics.py); any other
metric gets ``value x max(NOISE_Z x the series' noise, half the magnitude floor)``, the noise the
change detection itself measures (floor.series_noise_pct).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from strix_pipeline.analysis.bisect.releases import Candidate, releases_between
from strix_pipeline.analysis.bisect.search import Figure, Search, Side, runs_bound, side_of
from strix_pipeline.analysis.floor import series_noise_pct
from strix_pipeline.analysis.series import MEMORY_SCENARIO, Series, SeriesPoint, load_series
from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.records import ImageRecord
from strix_pipeline.warehouse import BisectionRecord, BisectionStep, ChangeRecord, Warehouse

NOISE_Z = 2.0  # the half-width of a metric's interval without its own, in the series' noise
BISECT_TAG = "strix/bisect"  # the Dagster tag of a bisection's benchmark runs (the bisection's id)
# a bisection decided by pairs (runner/pair_bisect.py, run by pair_bisect_job) waits with this before
# the partition of its first midpoint: the sensor launches the pair job, :func:`advance` leaves it be
BY_PAIRS = "by-pairs:"

RUN_SQL = """
SELECT run_id, status, usable, fingerprint, failure_reason, started_at
FROM v_run_base
WHERE host = ? AND engine = ? AND image_digest = ? AND started_at >= ?
ORDER BY started_at DESC
LIMIT 1
"""
AGG_SQL = """
SELECT {metric} AS value, ttft_p95_ci_low_ms AS ci_low, ttft_p95_ci_high_ms AS ci_high, requests_ok
FROM v_run_aggregates WHERE run_id = ? AND scenario = ? AND level = ?
"""
HELD_SQL = (
    "SELECT held_bytes AS value, NULL AS ci_low, NULL AS ci_high, 1 AS requests_ok FROM runs WHERE run_id = ?"
)
RUN_IMAGE_SQL = "SELECT image_digest FROM runs WHERE run_id = ?"


class BisectError(ValueError):
    """A bisection that cannot be set up: the message names the metric, the series or the version."""


# ---- figures ---------------------------------------------------------------------------------------


def run_figure(wh: Warehouse, run_id: str, version: str, series: Series, config: StrixConfig) -> Figure | str:
    """The run's figure on the series' metric with its interval, or why there is none."""
    if series.scenario == MEMORY_SCENARIO:
        rows = wh.query_df(HELD_SQL, [run_id]).to_dicts()
    else:
        sql = AGG_SQL.format(metric=series.metric)
        rows = wh.query_df(sql, [run_id, series.scenario, series.level]).to_dicts()
    if not rows or rows[0]["value"] is None or not rows[0]["requests_ok"]:
        return f"run {run_id} measured no {series.metric} at {series.scenario}@{series.level}"
    r = rows[0]
    value = float(r["value"])
    if series.metric == "ttft_p95_ms" and r["ci_low"] is not None and r["ci_high"] is not None:
        return Figure(version, value, float(r["ci_low"]), float(r["ci_high"]), run_id)
    half_pct = max(
        NOISE_Z * series_noise_pct([p.value for p in series.points]),
        config.change_detection.min_magnitude_pct / 2,
    )
    half = abs(value) * half_pct / 100
    return Figure(version, value, value - half, value + half, run_id)


# ---- the series, its brackets and what lies between --------------------------------------------------


def find_series(
    wh: Warehouse,
    *,
    host: str,
    engine: str,
    metric: str,
    scenario: str,
    level: int,
    fingerprint: str | None = None,
    without: frozenset[str] = frozenset(),
    loaded: list[Series] | None = None,
) -> Series:
    """The series the bisection searches; ``without``: a step's own run, a probe not yet recorded as
    one (it must neither be a point nor widen the series' noise)."""
    found = [
        replace(s, points=[p for p in s.points if p.run_id not in without])
        for s in (load_series(wh) if loaded is None else loaded)
        if (s.host, s.engine, s.metric, s.scenario, s.level) == (host, engine, metric, scenario, level)
        and (fingerprint is None or s.fingerprint == fingerprint)
    ]
    if not found:
        raise BisectError(f"no series of {engine} on {host} with {metric} at {scenario}@{level}")
    if len(found) > 1:
        # several configurations (model profiles) measure the metric: the one with most points
        found.sort(key=lambda s: len(s.points), reverse=True)
    return found[0]


def brackets(series: Series, before: str, after: str) -> tuple[SeriesPoint, SeriesPoint]:
    """The bracket runs: the newest run of ``before``, the first run of ``after`` (version order)."""
    b = [p for p in series.points if p.version == before]
    a = [p for p in series.points if p.version == after]
    if not b or not a:
        missing = before if not b else after
        names = ", ".join(dict.fromkeys(p.version for p in series.points))
        raise BisectError(
            f"{series.metric}: no usable run of {missing!r} in the series (its versions: {names})"
        )
    if b[-1].sort_key >= a[0].sort_key:
        raise BisectError(f"{before} does not come before {after} in version order")
    return b[-1], a[0]


def bracket_figures(
    wh: Warehouse, config: StrixConfig, series: Series, before: str, after: str
) -> tuple[SeriesPoint, SeriesPoint, Figure | str, Figure | str]:
    """The bracket runs and their figures (a string says why a bracket has none)."""
    b_point, a_point = brackets(series, before, after)
    fig_b = run_figure(wh, b_point.run_id, before, series, config)
    fig_a = run_figure(wh, a_point.run_id, after, series, config)
    return b_point, a_point, fig_b, fig_a


def _image_of(wh: Warehouse, run_id: str, images: list[ImageRecord]) -> ImageRecord | None:
    rows = wh.query_df(RUN_IMAGE_SQL, [run_id]).to_dicts()
    digest = rows[0]["image_digest"] if rows else None
    return next((i for i in images if i.digest == digest), None)


def _candidates(b: BisectionRecord) -> list[Candidate]:
    return [Candidate(**c) for c in json.loads(b.candidates)]


# ---- start, advance ----------------------------------------------------------------------------------


def start(
    wh: Warehouse,
    config: StrixConfig,
    *,
    host: str,
    engine: str,
    metric: str,
    scenario: str,
    level: int,
    before: str,
    after: str,
    fingerprint: str | None = None,
    change_id: str | None = None,
    max_runs: int | None = None,
    now: datetime | None = None,
    loaded: list[Series] | None = None,
    by_pairs: bool = False,
) -> BisectionRecord:
    """Set up (and store) the bisection of one change between the brackets ``before`` and ``after``
    (``loaded``: the warehouse's series when the caller has read them already). ``by_pairs``: it is
    decided by fresh pairs (the brackets too), never by the stored runs: it waits for the pair job."""
    now = now or datetime.now(UTC)
    series = find_series(
        wh,
        host=host,
        engine=engine,
        metric=metric,
        scenario=scenario,
        level=level,
        fingerprint=fingerprint,
        loaded=loaded,
    )
    b_point, a_point, fig_b, fig_a = bracket_figures(wh, config, series, before, after)
    images = wh.known_images(engine)
    b_image, a_image = _image_of(wh, b_point.run_id, images), _image_of(wh, a_point.run_id, images)
    if b_image is None or a_image is None:
        raise BisectError(
            f"{engine}: the image of {before if b_image is None else after} is not among the known "
            "images (refresh engine_images)"
        )
    candidates = releases_between(images, b_image, a_image, {p.version for p in series.points})
    key = (
        change_id
        or "manual-"
        + hashlib.sha256(
            f"{host}|{series.fingerprint}|{metric}|{level}|{before}|{after}|{now.isoformat()}".encode()
        ).hexdigest()[:12]
    )
    record = BisectionRecord(
        bisection_id=key,
        change_id=change_id,
        host=host,
        engine=engine,
        fingerprint=series.fingerprint,
        metric=metric,
        scenario=scenario,
        level=level,
        version_before=before,
        version_after=after,
        candidates=json.dumps([c.__dict__ for c in candidates]),
        status="running",
        first_release=None,
        last_without=None,
        next_key=None,
        runs_used=0,
        max_runs=max_runs or config.analysis.bisect_max_runs,
        reason=None,
        started_at=now,
        updated_at=now,
    )
    if by_pairs:
        middle = candidates[Search(len(candidates)).next_index() or 0] if candidates else None
        first = middle.key if middle else partition_key(engine, a_image)
        record = replace(
            record,
            next_key=BY_PAIRS + first,
            reason=f"{len(candidates)} release(s) between {before} and {after}, to be bisected by pairs "
            "(the brackets compared afresh, each midpoint with both, the release named checked against "
            "its predecessor)",
        )
    elif not candidates:
        record = replace(
            record,
            status="nothing_between",
            first_release=after,
            last_without=before,
            reason=f"no release between {before} and {after} was left unbenchmarked: {after} is "
            "the first that shows the change",
        )
    elif isinstance(fig_b, str) or isinstance(fig_a, str):
        record = replace(
            record,
            status="inconclusive",
            reason=f"a bracket has no figure: {fig_b if isinstance(fig_b, str) else fig_a}",
        )
    elif fig_b.overlaps(fig_a):
        record = replace(
            record,
            status="inconclusive",
            reason=f"the brackets' intervals overlap ({_fig(fig_b)} vs {_fig(fig_a)}): no side to "
            "put a release on",
        )
    else:
        nxt = candidates[Search(len(candidates)).next_index() or 0]
        record = replace(
            record,
            next_key=nxt.key,
            reason=f"{len(candidates)} release(s) between {before} and {after}; at most "
            f"{runs_bound(len(candidates))} run(s); next: {nxt.version}",
        )
    wh.save_bisection(record)
    return record


def _fig(f: Figure) -> str:
    return f"{f.version} {f.value:.4g} [{f.low:.4g}, {f.high:.4g}]"


def _search(b: BisectionRecord, steps: list[BisectionStep]) -> Search:
    """The open range after the steps so far (replayed: the stored state is the steps)."""
    index = {c.version: i for i, c in enumerate(_candidates(b))}
    s = Search(len(index))
    for st in steps:
        if st.version in index:
            s.record(index[st.version], st.side, st.note or "")  # type: ignore[arg-type]
    return s


def advance(
    wh: Warehouse,
    config: StrixConfig,
    b: BisectionRecord,
    *,
    now: datetime | None = None,
    ran: bool = False,
) -> BisectionRecord:
    """Read the step's run (a run of ``next_key``'s release started since the step was set), decide its
    side, store the step and set the next one. Without such a run the bisection waits, unchanged --
    unless ``ran`` (the step's Dagster run has ended): then the step is skipped as storing no run."""
    if b.status != "running" or not b.next_key or b.next_key.startswith(BY_PAIRS):
        return b  # a bisection by pairs is decided by its pair job, never by a stored run
    now = now or datetime.now(UTC)
    candidates = _candidates(b)
    index = next(i for i, c in enumerate(candidates) if c.key == b.next_key)
    cand = candidates[index]
    rows = wh.query_df(RUN_SQL, [b.host, b.engine, cand.digest, b.updated_at]).to_dicts()
    if not rows and not ran:
        return b
    series = find_series(
        wh,
        host=b.host,
        engine=b.engine,
        metric=b.metric,
        scenario=b.scenario,
        level=b.level,
        fingerprint=b.fingerprint,
        without=frozenset(r["run_id"] for r in rows),
    )
    _, _, fig_b, fig_a = bracket_figures(wh, config, series, b.version_before, b.version_after)
    run = rows[0] if rows else None
    side: Side
    figure: Figure | None = None
    if run is None:
        side, note = "skipped", "the step's run stored no run"
    elif not run["usable"]:
        side, note = "skipped", f"{run['status']}: {run['failure_reason'] or 'no reason recorded'}"
    elif series.fingerprint.removesuffix(f"/{series.scenario}") != run["fingerprint"]:
        side, note = (
            "skipped",
            "not comparable: its fingerprint differs from the series' (strix compare shows how)",
        )
    else:
        got = run_figure(wh, run["run_id"], cand.version, series, config)
        if isinstance(got, str):
            side, note = "skipped", got
        else:
            figure = got
            assert isinstance(fig_b, Figure) and isinstance(fig_a, Figure)
            side, note = side_of(got, fig_b, fig_a)
    steps = wh.bisection_steps(b.bisection_id)
    step = BisectionStep(
        bisection_id=b.bisection_id,
        step=len(steps) + 1,
        version=cand.version,
        partition_key=cand.key,
        run_id=run["run_id"] if run else None,
        value=figure.value if figure else None,
        low=figure.low if figure else None,
        high=figure.high if figure else None,
        side=side,
        note=note,
        decided_at=now,
    )
    search = _search(b, [*steps, step])
    used = b.runs_used + 1
    done = replace(b, runs_used=used, updated_at=now, next_key=None)
    if search.found:
        first = search.first_index()
        shows = candidates[first].version if first < len(candidates) else b.version_after
        without = candidates[first - 1].version if first > 0 else b.version_before
        figures = {
            s.version: Figure(s.version, s.value, s.low, s.high)
            for s in [*steps, step]
            if s.value is not None
        }
        if isinstance(fig_b, Figure) and isinstance(fig_a, Figure):
            figures = {fig_b.version: fig_b, fig_a.version: fig_a, **figures}
        pair = "; ".join(_fig(figures[v]) for v in (without, shows) if v in figures)
        done = replace(
            done,
            status="found",
            first_release=shows,
            last_without=without,
            reason=f"{shows} is the first release that shows the change ({without} does not), "
            f"after {used} run(s): {pair}",
        )
    elif search.stopped:
        done = replace(done, status="inconclusive", reason=f"stopped at {cand.version}: {search.stopped}")
    elif used >= b.max_runs or search.next_index() is None:
        lo, hi = search.lo, search.hi
        span = [c.version for c in candidates[lo:hi]] + ([b.version_after] if hi == len(candidates) else [])
        why = (
            f"bisect_max_runs ({b.max_runs}) spent"
            if used >= b.max_runs
            else "every release left could not be measured"
        )
        done = replace(
            done,
            status="exhausted",
            reason=f"{why}; the first release that shows the change is one of "
            f"{', '.join(span[:6])}{' …' if len(span) > 6 else ''}",
        )
    else:
        nxt = candidates[search.next_index()]  # type: ignore[index]
        done = replace(
            done, next_key=nxt.key, reason=f"{used} of at most {b.max_runs} run(s); next: {nxt.version}"
        )
    wh.save_bisection(done, [step])
    return done


# ---- what the regressions asset and the sensor ask ---------------------------------------------------


def bisectable(c: ChangeRecord) -> bool:
    """A confirmed change of the engine (not the host's, not acknowledged) between two versions."""
    return (
        c.status == "confirmed"
        and c.ack_status == "active"
        and not c.host_drift
        and c.version_before is not None
        and c.version_after is not None
        and c.version_before != c.version_after
    )


def plan_bisections(
    wh: Warehouse,
    config: StrixConfig,
    changes: list[ChangeRecord],
    *,
    now: datetime | None = None,
    by_pairs: Callable[[ChangeRecord], bool] = lambda _: False,
) -> list[BisectionRecord]:
    """Start the bisection of each bisectable change that has none yet; a change that cannot be
    bisected (no figure, brackets not found) is stored as such, with the reason. ``by_pairs``: which
    changes the pairs method can bisect here (runner/pair_bisect.can_bisect)."""
    known = {b.bisection_id for b in wh.list_bisections()}
    todo = [c for c in changes if bisectable(c) and c.change_id not in known]
    loaded = load_series(wh) if todo else []
    started = []
    for c in todo:
        try:
            started.append(
                start(
                    wh,
                    config,
                    host=c.host,
                    engine=c.engine,
                    metric=c.metric,
                    scenario=c.scenario,
                    level=c.level,
                    before=c.version_before,  # type: ignore[arg-type]
                    after=c.version_after,  # type: ignore[arg-type]
                    fingerprint=c.fingerprint,
                    change_id=c.change_id,
                    now=now,
                    loaded=loaded,
                    by_pairs=by_pairs(c),
                )
            )
        except BisectError:
            continue  # e.g. a bracket run vanished: the change stays, without a bisection
    return started


def advance_all(wh: Warehouse, config: StrixConfig, *, now: datetime | None = None) -> list[BisectionRecord]:
    """Advance every running bisection whose step's run has landed."""
    return [advance(wh, config, b, now=now) for b in wh.list_bisections(status="running")]


def pending_steps(wh: Warehouse) -> list[BisectionRecord]:
    """The running bisections and the release each waits for (``next_key``; one by pairs waits for its
    pair job: ``BY_PAIRS`` + its first midpoint's partition)."""
    return [b for b in wh.list_bisections(status="running") if b.next_key]


def summary(b: BisectionRecord) -> str:
    """What a bisection found, or how far it got, in one line."""
    if b.status in ("found", "nothing_between"):
        return f"first release: {b.first_release} (not {b.last_without}), after {b.runs_used} run(s)"
    return f"{b.status}: {b.reason}"


def steps_text(wh: Warehouse, b: BisectionRecord) -> list[str]:
    """Each step in words: release, figure, interval, side."""
    out = []
    for s in wh.bisection_steps(b.bisection_id):
        fig = f"{s.value:.4g} [{s.low:.4g}, {s.high:.4g}]" if s.value is not None else "no figure"
        out.append(f"{s.step}. {s.version}: {fig} -> {s.side}" + (f" ({s.note})" if s.note else ""))
    return out
