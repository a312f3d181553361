"""Comparisons by pairs, run: release B against release A on one host, judged by stats/paired.py.

The runs go in balanced random AB/BA pairs (:func:`paired.pair_order`), a fresh server for every run
(``run_one``: runner/pair_runs.py starts llama-server; the tests give a stand-in), each start's first
request a warm-up that is discarded and recorded as such. After each ladder step the pairs so far go
to :func:`paired.sequential` per metric; more pairs are run only while some metric is still
*unknown*, up to the cap. A failed run drops its pair (its partner's figures too: a lone run has no
ratio) and the plan is rebalanced (:func:`paired.rebalance`) so AB and BA stay even; past
``max_dropped`` drops the ladder takes the pairs there are (``exhausted``) and stops.

No Dagster, no warehouse writes: the caller stores the result (:func:`records`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

from strix_pipeline.hosts.probes.host_noise import HostNoise
from strix_pipeline.stats import paired
from strix_pipeline.warehouse.comparisons import ComparisonRecord, ComparisonRun

Side = Literal["A", "B"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class PairMetric:
    """A figure one run gives, and which way is better."""

    name: str
    higher_is_better: bool
    unit: str
    # the smallest target this figure is decided at: a tail's noise cannot carry a 5 % step
    min_target: float = 0.0

    def target(self, asked: float) -> float:
        return max(asked, self.min_target)


# The low-variance figures a comparison by pairs judges: decode at one client over many tokens, prefill from
# the engine's own timings over >= 3 requests, TTFT p50 and mean at 5 clients. TTFT p95 is reported
# with its interval but decided only at a >= 10 % target (benchmarks/precision.py measures its CV).
METRICS: dict[str, PairMetric] = {
    "decode_tokens_per_s": PairMetric("decode_tokens_per_s", True, "tok/s"),
    "prefill_tokens_per_s": PairMetric("prefill_tokens_per_s", True, "tok/s"),
    "ttft_p50_ms": PairMetric("ttft_p50_ms", False, "ms"),
    "ttft_mean_ms": PairMetric("ttft_mean_ms", False, "ms"),
    "ttft_p95_ms": PairMetric("ttft_p95_ms", False, "ms", min_target=0.10),
}
THROUGHPUT_METRICS = ("decode_tokens_per_s", "prefill_tokens_per_s")


@dataclass(frozen=True)
class ComparedRelease:
    """One side of a comparison: the tag people say (``b11434``) and what the engine needs to run it
    (``package_version`` ``11434.0.0``; None: the build installed here)."""

    tag: str
    package_version: str | None = None


@dataclass(frozen=True)
class RunFigures:
    """What one engine start measured: ``values`` per metric, the warm-up request it discarded."""

    values: dict[str, float]
    warmup_ms: float | None = None
    engine_build: str | None = None
    # the host while it measured (hosts/probes/host_noise.py); a busy one's pair is dropped and run again
    host_noise: HostNoise | None = None


class RunFailed(Exception):
    """A run that gave no figures (the engine did not start, died, or a measured request failed):
    its pair is dropped. The message says why."""


class RunOne(Protocol):
    def __call__(self, release: ComparedRelease, label: str) -> RunFigures:
        """Start a fresh server of ``release``, warm it up with one request, measure, stop it.
        ``label`` names the run in progress lines and logs. Raises :class:`RunFailed`."""
        ...


@dataclass(frozen=True)
class PairRun:
    """One engine start of the comparison, in the order they ran."""

    run: int  # 1-based
    pair: int  # the pair's place among the pairs attempted, 1-based
    side: Side
    release: str
    figures: RunFigures | None  # None: it failed
    error: str | None
    started_at: datetime
    ended_at: datetime
    kept: bool = True  # False once its pair was dropped


@dataclass(frozen=True)
class PairValue:
    """One kept pair's values of one metric."""

    order: str  # "AB" | "BA"
    a: float
    b: float


@dataclass(frozen=True)
class MetricResult:
    """B against A on one metric, as the ladder left it."""

    release_a: str
    release_b: str
    metric: str
    higher_is_better: bool
    pairs: int  # the kept pairs the last look judged
    ratio: float | None  # B/A; None before any look (too few pairs)
    low: float | None
    high: float | None
    verdict: paired.LadderVerdict
    looks: int
    target: float
    alpha: float
    look_alpha: float | None  # the alpha the last look spent: its interval's level
    cap: int
    values: tuple[PairValue, ...]
    ladder: paired.LadderResult

    @property
    def change_pct(self) -> float | None:
        return None if self.ratio is None else (self.ratio - 1) * 100


@dataclass(frozen=True)
class PairsResult:
    comparison_id: str
    host: str
    engine: str
    release_a: ComparedRelease
    release_b: ComparedRelease
    seed: int
    cap: int
    metrics: tuple[MetricResult, ...]
    runs: tuple[PairRun, ...]
    dropped_pairs: int
    started_at: datetime
    ended_at: datetime
    orders: tuple[str, ...] = field(default=())  # the kept pairs' orders, in the order they ran


def _order_text(o: paired.Order) -> str:
    return "".join(o)


def _first_look(pairs: int | None, cap: int) -> tuple[int, ...]:
    """The ladder: ``pairs`` before the first look (default the ladder's own first step), then the
    ladder's later steps; the cap is added by paired.looks_of."""
    if pairs is None:
        return paired.LADDER
    return (pairs, *(s for s in paired.LADDER if s > pairs))


def compare_releases(
    run_one: RunOne,
    a: ComparedRelease,
    b: ComparedRelease,
    *,
    metrics: Sequence[str] = tuple(METRICS),
    host: str = "local",
    engine: str = "llamacpp",
    pairs: int | None = None,
    cap: int = 10,
    target: float = 0.05,
    alpha: float = paired.ALPHA,
    seed: int = 0,
    max_dropped: int | None = None,
    progress: Progress = print,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> PairsResult:
    """Run A and B in pairs until every metric's ladder is done; see the module's docstring.

    ``pairs``: pairs before the first look (default 3, the ladder's first step); ``cap``: the most
    kept pairs; ``max_dropped``: the most pairs dropped for a failed run before the ladder takes what
    it has (default: half the cap, at least 2).
    """
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"no such metric to compare: {', '.join(unknown)} (known: {', '.join(METRICS)})")
    if pairs is not None and pairs < 2:
        raise ValueError(f"--pairs must be at least 2 (one pair says nothing of the noise), not {pairs}")
    if pairs is not None and pairs > cap:
        cap = pairs  # a first look beyond the cap would never come: the cap rises to meet it
    ladder = _first_look(pairs, cap)
    paired.looks_of(ladder, cap)  # refuses a cap below 2 before any server starts
    max_dropped = max(2, cap // 2) if max_dropped is None else max_dropped
    started = now()
    comparison_id = (
        "cmp-"
        + hashlib.sha256(
            f"{host}|{engine}|{a.tag}|{b.tag}|{seed}|{started.isoformat()}".encode()
        ).hexdigest()[:12]
    )
    side_release = {"A": a, "B": b}

    order = paired.pair_order(cap, seed)  # the plan of the whole cap; the ladder runs prefixes of it
    done = 0  # pairs of `order` attempted
    kept: list[tuple[paired.Order, dict[Side, RunFigures]]] = []
    runs: list[PairRun] = []
    dropped = 0
    attempted = 0

    def ladders(exhausted: bool) -> dict[str, paired.LadderResult]:
        out = {}
        for name in metrics:
            va = [figs["A"].values[name] for _, figs in kept]
            vb = [figs["B"].values[name] for _, figs in kept]
            out[name] = paired.sequential(
                va,
                vb,
                target=METRICS[name].target(target),
                alpha=alpha,
                higher_is_better=METRICS[name].higher_is_better,
                ladder=ladder,
                cap=cap,
                exhausted=exhausted,
            )
        return out

    def run_pair(o: paired.Order) -> dict[Side, RunFigures] | None:
        nonlocal attempted
        attempted += 1
        got: dict[Side, RunFigures] = {}
        mine: list[int] = []
        for side in o:
            rel = side_release[side]
            label = f"pair {attempted} {_order_text(o)}: {side} {rel.tag}"
            t0 = now()
            try:
                figs = run_one(rel, label)
                missing = [m for m in metrics if not _usable(figs.values.get(m))]
                if missing:
                    raise RunFailed(f"it measured no usable {', '.join(missing)}")
                if figs.host_noise is not None and figs.host_noise.busy:
                    # never averaged in: the pair goes and is run again, within the drop budget
                    raise RunFailed(f"busy host: {figs.host_noise.busy}")
            except RunFailed as e:
                runs.append(
                    PairRun(len(runs) + 1, attempted, side, rel.tag, None, str(e), t0, now(), kept=False)
                )
                for i in mine:  # the partner's figures go with the pair
                    runs[i] = _drop(runs[i])
                progress(f"{label}: failed, pair dropped: {e}")
                return None
            mine.append(len(runs))
            runs.append(PairRun(len(runs) + 1, attempted, side, rel.tag, figs, None, t0, now()))
            got[side] = figs
            progress(f"{label}: " + _figures_text(figs, metrics))
        return got

    state = ladders(exhausted=False)
    while True:
        want = max((s.next_pairs for s in state.values() if not s.done), default=None)
        if want is None:
            break
        while len(kept) < want and dropped <= max_dropped:
            o = order[done]
            figs = run_pair(o)
            done += 1
            if figs is not None:
                kept.append((o, figs))
                continue
            dropped += 1
            # the failed pair leaves the plan; the rest is re-planned to end with `cap` kept pairs
            # (order[:done] is the kept pairs' orders, then this one's)
            order = [*order[: done - 1], *paired.rebalance(order, done, {done - 1}, seed=seed)]
            done -= 1
        exhausted = dropped > max_dropped
        open_before = [name for name, s in state.items() if not s.done]
        state = ladders(exhausted=exhausted)
        for name in (
            open_before if kept else ()
        ):  # a metric decided earlier replays the same decision: said once
            progress(f"look {state[name].looks} at {len(kept)} pairs, {name}: {state[name].describe()}")
        if exhausted:
            progress(
                f"{dropped} pairs dropped for failed runs (at most {max_dropped}): the ladder ends "
                f"on the {len(kept)} kept"
            )
            break

    kept_orders = tuple(_order_text(k) for k, _ in kept)
    results = tuple(
        _metric_result(a, b, name, state[name], kept, kept_orders, target, alpha, cap) for name in metrics
    )
    return PairsResult(
        comparison_id,
        host,
        engine,
        a,
        b,
        seed,
        cap,
        results,
        tuple(runs),
        dropped,
        started,
        now(),
        kept_orders,
    )


def _usable(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0


def _drop(r: PairRun) -> PairRun:
    return replace(r, kept=False)


def _figures_text(figs: RunFigures, metrics: Sequence[str]) -> str:
    parts = [f"{METRICS[m].name} {figs.values[m]:.2f} {METRICS[m].unit}" for m in metrics]
    if figs.warmup_ms is not None:
        parts.append(f"warm-up {figs.warmup_ms:.0f} ms discarded")
    return ", ".join(parts)


def _metric_result(
    a: ComparedRelease,
    b: ComparedRelease,
    name: str,
    s: paired.LadderResult,
    kept: list[tuple[paired.Order, dict[Side, RunFigures]]],
    orders: tuple[str, ...],
    target: float,
    alpha: float,
    cap: int,
) -> MetricResult:
    values = tuple(
        PairValue(o, figs["A"].values[name], figs["B"].values[name])
        for o, (_, figs) in zip(orders, kept, strict=True)
    )
    c = s.comparison
    finite = c is not None and math.isfinite(c.ratio)
    look_alpha = s.alphas[s.looks - 1] if s.looks else None
    return MetricResult(
        a.tag,
        b.tag,
        name,
        METRICS[name].higher_is_better,
        c.n_pairs if c else len(kept),
        c.ratio if finite else None,
        c.low if finite and math.isfinite(c.low) else None,
        c.high if finite and math.isfinite(c.high) else None,
        s.verdict,
        s.looks,
        METRICS[name].target(target),
        alpha,
        look_alpha,
        cap,
        values,
        s,
    )


def records(result: PairsResult) -> tuple[list[ComparisonRecord], list[ComparisonRun]]:
    """The warehouse's rows of a comparison (warehouse/comparisons.py)."""
    rows = [
        ComparisonRecord(
            comparison_id=result.comparison_id,
            host=result.host,
            engine=result.engine,
            release_a=m.release_a,
            release_b=m.release_b,
            metric=m.metric,
            higher_is_better=m.higher_is_better,
            pairs=m.pairs,
            ratio=m.ratio,
            low=m.low,
            high=m.high,
            verdict=m.verdict,
            looks=m.looks,
            target=m.target,
            alpha=m.alpha,
            look_alpha=m.look_alpha,
            cap=m.cap,
            seed=result.seed,
            values_a=[v.a for v in m.values],
            values_b=[v.b for v in m.values],
            orders=[v.order for v in m.values],
            dropped_pairs=result.dropped_pairs,
            started_at=result.started_at,
            ended_at=result.ended_at,
        )
        for m in result.metrics
    ]
    runs = [
        ComparisonRun(
            comparison_id=result.comparison_id,
            run=r.run,
            pair=r.pair,
            side=r.side,
            release=r.release,
            kept=r.kept,
            warmup_ms=r.figures.warmup_ms if r.figures else None,
            figures=json.dumps(r.figures.values, sort_keys=True) if r.figures else None,
            engine_build=r.figures.engine_build if r.figures else None,
            error=r.error,
            started_at=r.started_at,
            ended_at=r.ended_at,
        )
        for r in result.runs
    ]
    return rows, runs
