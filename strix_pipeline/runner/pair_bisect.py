"""A bisection the way Pinpoint does it: each midpoint compared by pairs with both brackets.

The search is analysis/bisect/search.py's (:class:`Search` over the releases between the brackets,
:func:`pair_side` for where a midpoint falls). Each step runs two comparisons by pairs
(:func:`runner.pairs.compare_releases`): the midpoint against the release without the change, and
against the one with it, pairs added only while a verdict is *unknown*, up to the cap. A midpoint
*same* as the release without the change and not *same* as the one with it falls before the change;
one *different* from the release without it falls after. The search ends with the first release that
differs from its predecessor named, or *inconclusive* (same as both, or unknown against both at the
budget), or *exhausted* (the steps the budget allows were spent).

No Dagster: :func:`bisect_by_pairs` runs the search and returns :class:`PairBisection`; :func:`store`
writes it (``bisections``, ``bisection_steps`` and each comparison in ``comparisons``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from strix_pipeline.analysis.bisect.search import Search, Verdict, pair_side, runs_bound
from strix_pipeline.runner.pair_model import ComparedRelease, MetricResult, PairsResult, Progress, RunOne
from strix_pipeline.runner.pairs import compare_releases, records
from strix_pipeline.warehouse.bisections import BisectionRecord, BisectionStep

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

STEP_KEY_PREFIX = "pairs:"  # a step's partition_key: the two comparisons it ran, by id
BRACKET_MARGIN = 0.5  # of the target: the equivalence margin of a midpoint against a bracket


@dataclass
class PairBisection:
    record: BisectionRecord
    steps: list[BisectionStep] = field(default_factory=list)
    comparisons: list[PairsResult] = field(default_factory=list)

    @property
    def engine_starts(self) -> int:
        return sum(len(c.runs) for c in self.comparisons)


def _verdict(m: MetricResult) -> Verdict:
    return m.verdict if m.verdict in ("different", "same") else "unknown"  # inconclusive at budget


def _said(m: MetricResult, against: str) -> str:
    if m.ratio is None:
        return f"vs {against}: {m.verdict} (no pair kept)"
    return f"vs {against}: {m.verdict}, ratio {m.ratio:.4f} [{m.low:.4f}, {m.high:.4f}] over {m.pairs} pairs"


def bisection_id(engine: str, metric: str, before: str, after: str, started: datetime) -> str:
    text = json.dumps([engine, metric, before, after, started.isoformat()])
    return "pbis-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def bisect_by_pairs(
    run_one: RunOne,
    before: ComparedRelease,
    after: ComparedRelease,
    between: Sequence[ComparedRelease],
    *,
    metric: str,
    host: str = "local",
    engine: str = "llamacpp",
    cap: int = 10,
    target: float = 0.05,
    seed: int = 0,
    max_steps: int | None = None,
    change_id: str | None = None,
    fingerprint: str = "",
    scenario: str = "",
    level: int = 0,
    progress: Progress = print,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> PairBisection:
    """Search ``between`` (the releases strictly between the brackets, in version order) for the first
    release whose ``metric`` differs from ``before``'s by at least the ``target`` step.

    ``max_steps``: the most midpoints it decides (default: what a binary search over ``between``
    needs; a skipped one does not count); each costs two comparisons of 3 to ``cap`` pairs, two
    engine starts a pair."""
    started = now()
    bid = bisection_id(engine, metric, before.tag, after.tag, started)
    budget = max_steps if max_steps is not None else runs_bound(len(between))
    out = PairBisection(
        BisectionRecord(
            bisection_id=bid,
            change_id=change_id,
            host=host,
            engine=engine,
            fingerprint=fingerprint,
            metric=metric,
            scenario=scenario,
            level=level,
            version_before=before.tag,
            version_after=after.tag,
            candidates=json.dumps([{"version": r.tag, "key": r.package_version} for r in between]),
            status="running" if between else "nothing_between",
            first_release=None,
            last_without=None,
            next_key=None,
            runs_used=0,
            max_runs=budget,
            reason=None,
            started_at=started,
            updated_at=started,
        )
    )
    search = Search(len(between))
    exhausted = False
    while (i := search.next_index()) is not None:
        # a midpoint that could not be run is skipped (as `git bisect skip`) and costs no step of the
        # budget: the search goes on around it, bounded by the releases there are
        if sum(s.side != "skipped" for s in out.steps) >= budget:
            search.stopped, exhausted = f"{budget} steps spent before the range closed", True
            break
        mid = between[i]
        progress(
            f"[{bid}] step {len(out.steps) + 1}: {mid.tag} against {before.tag} and {after.tag} by pairs"
        )
        results = [
            compare_releases(
                run_one,
                a,
                b,
                metrics=[metric],
                host=host,
                engine=engine,
                cap=cap,
                target=target,
                # a midpoint is *same* as a bracket when shown nearer it than half the step: at the
                # step itself, equivalence to the wrong bracket is a coin the test may toss
                margin_share=BRACKET_MARGIN,
                seed=seed + 2 * len(out.steps) + k,
                progress=progress,
                now=now,
            )
            for k, (a, b) in enumerate(((before, mid), (after, mid)))
        ]
        out.comparisons += results
        vs_before, vs_after = (r.metrics[0] for r in results)
        if vs_before.pairs == 0 and vs_after.pairs == 0:
            side, why = "skipped", f"{mid.tag} gave no pair against either bracket (every run of it failed?)"
        else:
            side, why = pair_side(_verdict(vs_before), _verdict(vs_after))
        search.record(i, side, why)
        note = f"{why}; {_said(vs_before, before.tag)}; {_said(vs_after, after.tag)}"
        progress(f"[{bid}] {mid.tag}: {side}: {note}")
        out.steps.append(
            BisectionStep(
                bisection_id=bid,
                step=len(out.steps) + 1,
                version=mid.tag,
                partition_key=STEP_KEY_PREFIX + ",".join(r.comparison_id for r in results),
                run_id=None,
                value=vs_before.ratio,
                low=vs_before.low,
                high=vs_before.high,
                side=side,
                note=note,
                decided_at=now(),
            )
        )
    _finish(out, search, exhausted, before, after, between, now())
    return out


def _finish(
    out: PairBisection,
    search: Search,
    exhausted: bool,
    before: ComparedRelease,
    after: ComparedRelease,
    between: Sequence[ComparedRelease],
    at: datetime,
) -> None:
    r = out.record
    r.runs_used, r.updated_at = out.engine_starts, at
    if not between:
        r.first_release, r.last_without = after.tag, before.tag
        r.reason = "no release between the brackets: the release with the change made it"
    elif search.found:
        first = search.first_index()
        r.status = "found"
        r.first_release = between[first].tag if first < len(between) else after.tag
        r.last_without = between[first - 1].tag if first > 0 else before.tag
        r.reason = (
            f"{r.first_release} differs from {r.last_without}, the last release the same as {before.tag}"
        )
    elif exhausted:
        r.status, r.reason = "exhausted", search.stopped
    else:
        r.status, r.reason = "inconclusive", search.stopped or "every release left was skipped"
    r.reason = f"{r.reason} ({len(out.steps)} steps, {out.engine_starts} engine starts)"


def store(wh: Warehouse, found: PairBisection) -> None:
    """Every comparison the search ran, then the bisection with its steps (which name them)."""
    for result in found.comparisons:
        wh.save_comparison(*records(result))
    wh.save_bisection(found.record, found.steps)
