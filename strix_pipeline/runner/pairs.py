"""Comparisons by pairs, run: release B against release A on one host, judged by stats/paired.py.

The runs go in balanced random AB/BA pairs (:func:`paired.pair_order`), a fresh server for every run
(``run_one``: runner/pair_runs.py starts llama-server; the tests give a stand-in), each start's first
request a warm-up that is discarded and recorded as such. After each ladder step the pairs so far go
to :func:`paired.sequential` per metric; more pairs are run only while some metric is still
*unknown*, up to the cap. A run that gave no figures (the engine did not start or died) or ran on a
busy host drops its pair (its partner's figures too: a lone run has no ratio) and the plan is
rebalanced (:func:`paired.rebalance`) so AB and BA stay even; past ``max_dropped`` drops the ladder
takes the pairs there are (``exhausted``) and stops.

No side is left out for free:

- Failures are data. A run whose measured requests partly failed keeps its figures (over the
  requests that succeeded) with its failure rate; a run counts as failed when it gave no figures or
  any measured request failed. The failed runs of A and B are compared (stats/proportions.py): a side
  failing more with confidence at ``alpha`` is *different (fails more)*, and no metric is *within
  ±target* while the failures lean one way (FAILURES_ALIKE_P) -- the ladder runs on to the cap while
  they do, and ends inconclusive if they still do there.
- A busy host excludes a run, but a side excluded more often than the other is a side selected on
  its good runs: when the exclusions differ (EXCLUSIONS_DIFFER_P) every verdict is void, said why.

Correctness is measured beside the speed: each run answers the evaluation set (strix_pipeline/quality),
each side's answers are compared item by item with the other's, and a side scoring lower with
confidence at ``alpha`` is *different (quality)* whatever its speed.

The family-wise error: a comparison's verdict is its primary metric's (the first asked, unless
named), wrong with probability <= ``alpha`` over all its looks; the other metrics are descriptive,
each at ``alpha`` on its own, with no family-wise statement (docs/comparing.md).

No Dagster, no warehouse writes: the caller stores the result (:func:`records`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from strix_pipeline.quality import score as quality_score
from strix_pipeline.runner.pair_model import (
    EXCLUSIONS_DIFFER_P,
    FAILURES_ALIKE_P,
    KNOWN_METRICS,
    METRICS,
    ComparedRelease,
    MetricResult,
    PairRun,
    PairsResult,
    PairValue,
    Progress,
    RunFailed,
    RunFigures,
    RunOne,
    Side,
)
from strix_pipeline.stats import paired
from strix_pipeline.stats.proportions import Proportions, two_proportions
from strix_pipeline.units import gib_text


def drop_budget(cap: int) -> int:
    """The pairs a comparison may drop for failed or excluded runs before its ladder takes what it has."""
    return max(2, cap // 2)


def most_pairs(cap: int) -> int:
    """The most pairs one comparison attempts: ``cap`` kept, the drops it allows and the one past them."""
    return cap + drop_budget(cap) + 1


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
    primary: str | None = None,
    host: str = "local",
    engine: str = "llamacpp",
    pairs: int | None = None,
    cap: int = 10,
    target: float = 0.05,
    alpha: float = paired.ALPHA,
    margin_share: float = 1.0,
    seed: int = 0,
    max_dropped: int | None = None,
    descriptive: Mapping[str, str] | None = None,
    progress: Progress = print,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> PairsResult:
    """Run A and B in pairs until every metric's ladder is done; see the module's docstring.

    ``primary``: the metric the comparison's verdict is (default the first of ``metrics``);
    ``margin_share``: the equivalence margin *same* is judged at, as a share of the target;
    ``pairs``: pairs before the first look (default 3, the ladder's first step); ``cap``: the most
    kept pairs; ``max_dropped``: the most pairs dropped for a failed or excluded run before the
    ladder takes what it has (default: half the cap, at least 2); ``descriptive``: metrics reported
    but never deciding here, with why (pair_model.descriptive_only): never the primary, no pair run
    for them, their verdict withheld.
    """
    descriptive = dict(descriptive or {})
    unknown = [m for m in metrics if m not in KNOWN_METRICS]
    if unknown:
        raise ValueError(
            f"no such metric to compare: {', '.join(unknown)} (known: {', '.join(KNOWN_METRICS)})"
        )
    if primary is None:
        primary = next((m for m in metrics if m not in descriptive), None)
        if primary is None and metrics:
            raise ValueError(f"every metric asked is {'; '.join(descriptive.values())}: none can decide")
    if primary in descriptive:
        raise ValueError(f"--primary {primary}: {descriptive[primary]}")
    if primary not in metrics:
        raise ValueError(f"the primary metric {primary} is not among those compared ({', '.join(metrics)})")
    if pairs is not None and pairs < 2:
        raise ValueError(f"--pairs must be at least 2 (one pair says nothing of the noise), not {pairs}")
    if pairs is not None and pairs > cap:
        cap = pairs  # a first look beyond the cap would never come: the cap rises to meet it
    ladder = _first_look(pairs, cap)
    plan = paired.looks_of(ladder, cap)  # refuses a cap below 2 before any server starts
    max_dropped = drop_budget(cap) if max_dropped is None else max_dropped
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
            both = [figs for _, figs in kept if _gave(figs, name)]
            va = [figs["A"].values[name] for figs in both]
            vb = [figs["B"].values[name] for figs in both]
            out[name] = paired.sequential(
                va,
                vb,
                target=KNOWN_METRICS[name].target(target),
                alpha=alpha,
                higher_is_better=KNOWN_METRICS[name].higher_is_better,
                ladder=ladder,
                cap=cap,
                exhausted=exhausted,
                margin=KNOWN_METRICS[name].target(target) * margin_share,
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
            figs: RunFigures | None = None
            try:
                figs = run_one(rel, label)
                missing = [
                    m for m in metrics if not KNOWN_METRICS[m].optional and not _usable(figs.values.get(m))
                ]
                if missing:
                    raise RunFailed(f"it measured no usable {', '.join(missing)}")
                if figs.host_noise is not None and figs.host_noise.busy:
                    # never averaged in: the pair goes and is run again, within the drop budget; the
                    # exclusion is counted per side, figures kept for the record
                    raise _Busy(f"busy host: {figs.host_noise.busy}")
            except RunFailed as e:
                busy = isinstance(e, _Busy)
                kept_figs = figs if busy else None
                runs.append(
                    PairRun(
                        len(runs) + 1, attempted, side, rel.tag, kept_figs, str(e), t0, now(), False, busy
                    )
                )
                for i in mine:  # the partner's figures go with the pair
                    runs[i] = _drop(runs[i])
                progress(f"{label}: {'excluded' if busy else 'failed'}, pair dropped: {e}")
                return None
            mine.append(len(runs))
            runs.append(PairRun(len(runs) + 1, attempted, side, rel.tag, figs, None, t0, now()))
            got[side] = figs
            progress(f"{label}: " + _figures_text(figs, metrics))
        return got

    def withheld(state: dict[str, paired.LadderResult]) -> bool:
        """Verdicts the failed or excluded runs do not let stand yet: run on to the cap while the
        exclusions differ between the sides (they may void every verdict there) or, for a *same*,
        while the failed runs do (at the cap it needs FAILURES_ALIKE_P)."""
        excluded, failed = _exclusions(runs), _failures(runs)
        return excluded.k1 != excluded.k2 or (
            failed.k1 != failed.k2 and any(s.verdict == "same" for s in state.values())
        )

    state = ladders(exhausted=False)
    while True:
        # an optional figure rides on the pairs the others run: it may have fewer, never asks for more
        deciding = [
            s for name, s in state.items() if name not in descriptive and not KNOWN_METRICS[name].optional
        ]
        want = max((s.next_pairs for s in deciding if not s.done), default=None)
        if want is None and withheld(state) and dropped <= max_dropped:
            want = next((n for n in plan if n > len(kept)), None)
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
                f"{dropped} pairs dropped for failed or excluded runs (at most {max_dropped}): the ladder "
                f"ends on the {len(kept)} kept"
            )
            break

    riding = [m for m in metrics if m in descriptive or KNOWN_METRICS[m].optional]
    if riding:  # looked at on the pairs the deciding metrics ran
        last = ladders(exhausted=True)
        state |= {name: last[name] for name in riding}
    failures, exclusions = _failures(runs), _exclusions(runs)
    void = None
    if exclusions.p_value < EXCLUSIONS_DIFFER_P:
        void = (
            f"a busy host excluded {exclusions.k1} of {exclusions.n1} runs of A and {exclusions.k2} of "
            f"{exclusions.n2} of B (p {exclusions.p_value:.3f}): the ratio would be judged on one side's "
            "quieter runs"
        )
    unalike = None
    if failures.p_value < FAILURES_ALIKE_P:
        unalike = (
            f"failed runs: A {failures.k1} of {failures.n1}, B {failures.k2} of {failures.n2} "
            f"(p {failures.p_value:.3f}): not shown to fail alike"
        )
    kept_orders = tuple(_order_text(k) for k, _ in kept)
    results = tuple(
        _metric_result(
            a,
            b,
            name,
            state[name],
            kept,
            kept_orders,
            target,
            alpha,
            cap,
            name == primary,
            void or descriptive.get(name),
            unalike,
        )
        for name in metrics
    )
    result = PairsResult(
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
        alpha,
        failures,
        exclusions,
        void,
        *_quality(runs, alpha),
    )
    progress(f"{result.headline()} ({result.family_text()})")
    return result


def _gave(figs: dict[Side, RunFigures], name: str) -> bool:
    """Both runs of a kept pair gave ``name``: an optional figure (pair_model.PairMetric.optional, a
    Box run's memory reading) is judged on the pairs that have it, and the runs' other figures count."""
    return _usable(figs["A"].values.get(name)) and _usable(figs["B"].values.get(name))


class _Busy(RunFailed):
    """A run on a busy host: excluded, not failed."""


def _failures(runs: Sequence[PairRun]) -> Proportions:
    """Failed runs of A against failed runs of B, out of each side's runs that were not excluded."""
    n = {s: sum(r.side == s and not r.excluded for r in runs) for s in ("A", "B")}
    k = {s: sum(r.side == s and r.failed for r in runs) for s in ("A", "B")}
    return two_proportions(k["A"], n["A"], k["B"], n["B"])


def _exclusions(runs: Sequence[PairRun]) -> Proportions:
    """Runs of A excluded for a busy host against runs of B, out of each side's runs."""
    n = {s: sum(r.side == s for r in runs) for s in ("A", "B")}
    k = {s: sum(r.side == s and r.excluded for r in runs) for s in ("A", "B")}
    return two_proportions(k["A"], n["A"], k["B"], n["B"])


def _answers(runs: Sequence[PairRun], side: Side) -> dict[str, bool]:
    """A side's evaluation set, item by item: passed when most of its runs that answered it passed it
    (greedy answers repeat; a majority keeps one odd run from deciding)."""
    votes: dict[str, list[bool]] = {}
    for r in runs:
        if r.side == side and r.figures is not None and not r.excluded and r.figures.quality:
            for item, ok in r.figures.quality.items():
                votes.setdefault(item, []).append(ok)
    return {item: 2 * sum(v) > len(v) for item, v in votes.items()}


def _quality(
    runs: Sequence[PairRun], alpha: float
) -> tuple[quality_score.QualityComparison | None, quality_score.QualityComparison | None]:
    """B's evaluation set against A's, then A's against B's (None: a side answered none): a side
    scoring lower with confidence is *different (quality)*, whatever its speed."""
    a, b = _answers(runs, "A"), _answers(runs, "B")
    if not a or not b:
        return None, None
    return quality_score.compare(a, b, alpha), quality_score.compare(b, a, alpha)


def _usable(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0


def _drop(r: PairRun) -> PairRun:
    return replace(r, kept=False)


def _figures_text(figs: RunFigures, metrics: Sequence[str]) -> str:
    parts = [
        f"{m} {gib_text(v, 2)}"
        if KNOWN_METRICS[m].unit == "bytes"
        else f"{m} {v:.2f} {KNOWN_METRICS[m].unit}"
        for m in metrics
        if (v := figs.values.get(m)) is not None
    ]
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
    primary: bool = False,
    void: str | None = None,
    unalike: str | None = None,
) -> MetricResult:
    """``void``: why no verdict stands; ``unalike``: why no *same* does (failures leaning one way)."""
    values = tuple(
        PairValue(o, figs["A"].values[name], figs["B"].values[name])
        for o, (_, figs) in zip(orders, kept, strict=True)
        if _gave(figs, name)
    )
    c = s.comparison
    finite = c is not None and math.isfinite(c.ratio)
    look_alpha = s.alphas[s.looks - 1] if s.looks else None
    verdict, why = s.verdict, void or (unalike if s.verdict == "same" else None)
    if why is not None and verdict in ("different", "same"):
        verdict = "inconclusive"
    return MetricResult(
        a.tag,
        b.tag,
        name,
        KNOWN_METRICS[name].higher_is_better,
        c.n_pairs if c else len(values),
        c.ratio if finite else None,
        c.low if finite and math.isfinite(c.low) else None,
        c.high if finite and math.isfinite(c.high) else None,
        verdict,
        s.looks,
        KNOWN_METRICS[name].target(target),
        alpha,
        look_alpha,
        cap,
        values,
        s,
        primary,
        KNOWN_METRICS[name].estimator,
        why,
    )
