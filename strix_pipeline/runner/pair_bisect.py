"""A bisection the way Pinpoint does it: each midpoint compared by pairs with both brackets, and the
release it names compared with its predecessor before it is named.

Every figure is fresh: no stored run enters a verdict, so host drift since the change was detected
lands on both sides of every pair and cancels. In order:

1. the brackets are compared by pairs (:func:`runner.pairs.compare_releases`): the range's change and
   its direction. Not *different*: there is nothing to bisect, said so;
2. the search (analysis/bisect/search.py's :class:`Search`, :func:`pair_side`): each midpoint compared
   by pairs with the range's two brackets, pairs added only while a verdict is *unknown*, up to the
   cap;
3. the release the search narrows to is compared by pairs with its predecessor: named only when they
   are *different* in the direction of the range's change. If not, and some midpoint lay between the
   brackets (*different* from both, on the way from one to the other), the range is reported as a
   **drift** over it: its steps are small and same-signed, no release made the change. Otherwise the
   release is not named and the reason says why;
4. once one release is named, the rest of the range (it, then the release with the change) is compared
   by pairs: *different*, and a second step is searched for there the same way.

The cost is bounded: ``max_steps`` midpoints, ``cap`` pairs a comparison, ``max_pairs`` pairs in all
(a step, two comparisons, is not begun when it could pass it); each step prints what it cost.

No Dagster: :func:`bisect_by_pairs` runs the search and returns :class:`PairBisection`; :func:`store`
writes it (``bisections``, ``bisection_steps`` and each comparison in ``comparisons``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from strix_pipeline.analysis.bisect.search import Search, Verdict, pair_side, runs_bound
from strix_pipeline.analysis.bisect.steps import BY_PAIRS
from strix_pipeline.config import StrixConfig
from strix_pipeline.runner.pair_model import (
    METRICS,
    ComparedRelease,
    MetricResult,
    PairsResult,
    Progress,
    RunOne,
    descriptive_only,
)
from strix_pipeline.runner.pair_records import records
from strix_pipeline.runner.pair_runs import PAIR_HOST, PairSpec, pair_profile
from strix_pipeline.runner.pairs import compare_releases, most_pairs
from strix_pipeline.warehouse.bisections import BisectionRecord, BisectionStep
from strix_pipeline.warehouse.changes import ChangeRecord

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

STEP_KEY_PREFIX = "pairs:"  # a step's partition_key: the two comparisons it ran, by id
BRACKET_MARGIN = 0.5  # of the target: the equivalence margin of a midpoint against a bracket


@dataclass
class PairBisection:
    record: BisectionRecord
    steps: list[BisectionStep] = field(default_factory=list)
    comparisons: list[PairsResult] = field(default_factory=list)
    # the releases named, each with its predecessor, in version order: (first that shows it, last without)
    named: list[tuple[str, str]] = field(default_factory=list)

    @property
    def engine_starts(self) -> int:
        return sum(len(c.runs) for c in self.comparisons)

    @property
    def pairs_spent(self) -> int:
        return pairs_of(self.comparisons)


def can_bisect(config: StrixConfig, host: str, engine: str, metric: str, level: int) -> bool:
    """Whether the sensor's bisection of a change is decided by pairs: ``[analysis] bisect_by`` is
    "pairs", the change is of llama-server releases on host local, and a run of a pair measures its
    figure at its level (decode at one client, TTFT at the pair's clients, prefill at its prompt) in a
    way pairs can decide here: TTFT at several clients on a host whose load generator shares the
    engine's cores is descriptive only (pair_model.descriptive_only), no budget of pairs resolves it,
    so such a change is bisected by the stored runs, as any change pairs cannot run."""
    a = config.analysis
    if a.bisect_by != "pairs" or host != PAIR_HOST or engine != "llamacpp" or metric not in METRICS:
        return False
    profile = config.profiles.get(pair_profile(config))
    if profile is None:
        return False
    spec = PairSpec.of(profile)
    if metric.startswith("ttft_"):
        return level == spec.ttft_clients and descriptive_only(metric, level, os.cpu_count()) is None
    if "prefill" in metric:
        return level == spec.prefill_tokens
    return level == 1


def pairs_rule(config: StrixConfig) -> Callable[[ChangeRecord], bool]:
    """:func:`can_bisect` for a change (the regressions asset's question when it starts a bisection)."""
    return lambda c: can_bisect(config, c.host, c.engine, c.metric, c.level)


def pairs_of(comparisons: Sequence[PairsResult]) -> int:
    """The pairs attempted (kept or dropped): two engine starts each."""
    return sum(-(-len(c.runs) // 2) for c in comparisons)


def pairs_bound(n_between: int, cap: int, max_pairs: int | None = None) -> int:
    """The most pairs one bisection over ``n_between`` releases can spend: the brackets, two
    comparisons a step of the search, the verification, then the rest of the range, a second search
    and its verification -- each comparison at most runner/pairs.most_pairs -- within ``max_pairs``."""
    steps = runs_bound(n_between)
    most = 2 * most_pairs(cap) * (1 + 2 * steps + 1)
    return most if max_pairs is None else min(most, max_pairs)


def week_lines(bisections: Sequence[BisectionRecord], cap: int, max_pairs: int) -> list[str]:
    """What the running bisections by pairs may still cost this week (`strix plan --week`): each one's
    bound in pairs and engine starts, and their sum."""
    mine = [b for b in bisections if b.status == "running" and (b.next_key or "").startswith(BY_PAIRS)]
    if not mine:
        return []
    out, total = [], 0
    for b in mine:
        n = len(json.loads(b.candidates))
        most = pairs_bound(n, cap, max_pairs)
        total += most
        out.append(
            f"  {b.bisection_id}: {b.engine} {b.metric} {b.version_before}..{b.version_after}, {n} releases "
            f"between: at most {most} pairs ({2 * most} engine starts), a step at most {2 * most_pairs(cap)}"
        )
    head = (
        f"bisections by pairs on {PAIR_HOST}: {len(mine)}, at most {total} pairs ({2 * total} engine starts; "
        f"[analysis] bisect_max_pairs {max_pairs} each)"
    )
    return ["", head + ":", *out]


def _verdict(m: MetricResult) -> Verdict:
    return m.verdict if m.verdict in ("different", "same") else "unknown"  # inconclusive at budget


def _said(m: MetricResult, against: str) -> str:
    if m.ratio is None:
        return f"vs {against}: {m.verdict} (no pair kept)"
    return f"vs {against}: {m.verdict}, ratio {m.ratio:.4f} [{m.low:.4f}, {m.high:.4f}] over {m.pairs} pairs"


def _up(m: MetricResult) -> bool | None:
    """B above A (True), below (False), or no ratio."""
    return None if m.ratio is None else m.ratio > 1


def bisection_id(engine: str, metric: str, before: str, after: str, started: datetime) -> str:
    text = json.dumps([engine, metric, before, after, started.isoformat()])
    return "pbis-" + hashlib.sha256(text.encode()).hexdigest()[:12]


class _OutOfPairs(Exception):
    """The next comparison could pass ``max_pairs``."""


@dataclass
class _Bisector:
    """One bisection's comparisons, steps and budget; see the module's docstring."""

    run_one: RunOne
    out: PairBisection
    metric: str
    host: str
    engine: str
    cap: int
    target: float
    seed: int
    steps_budget: int
    max_pairs: int | None
    progress: Progress
    now: Callable[[], datetime]
    # each decided midpoint: its comparisons with the release without the change and with it
    midpoints: list[tuple[str, MetricResult, MetricResult]] = field(default_factory=list)

    def compare(self, a: ComparedRelease, b: ComparedRelease, margin_share: float = 1.0) -> MetricResult:
        spent, most = self.out.pairs_spent, most_pairs(self.cap)
        if self.max_pairs is not None and spent + most > self.max_pairs:
            raise _OutOfPairs(
                f"the next comparison ({a.tag} against {b.tag}, up to {most} pairs) could pass the "
                f"budget of {self.max_pairs} pairs ({spent} spent)"
            )
        result = compare_releases(
            self.run_one,
            a,
            b,
            metrics=[self.metric],
            host=self.host,
            engine=self.engine,
            cap=self.cap,
            target=self.target,
            margin_share=margin_share,
            seed=self.seed + len(self.out.comparisons),
            progress=self.progress,
            now=self.now,
        )
        self.out.comparisons.append(result)
        return result.metrics[0]

    def search(
        self, before: ComparedRelease, after: ComparedRelease, between: Sequence[ComparedRelease]
    ) -> tuple[Search, bool]:
        """The search over ``between``; whether it ended on the budget (steps or pairs)."""
        bid = self.out.record.bisection_id
        search = Search(len(between))
        steps_before = sum(s.side != "skipped" for s in self.out.steps)
        while (i := search.next_index()) is not None:
            # a midpoint that could not be run is skipped (as `git bisect skip`) and costs no step of
            # the budget: the search goes on around it, bounded by the releases there are
            if sum(s.side != "skipped" for s in self.out.steps) - steps_before >= self.steps_budget:
                search.stopped = f"{self.steps_budget} steps spent before the range closed"
                return search, True
            spent, most = self.out.pairs_spent, 2 * most_pairs(self.cap)
            if self.max_pairs is not None and spent + most > self.max_pairs:
                search.stopped = (
                    f"the next step (up to {most} pairs) could pass the budget of "
                    f"{self.max_pairs} pairs ({spent} spent)"
                )
                return search, True
            mid = between[i]
            n = len(self.out.steps) + 1
            self.progress(f"[{bid}] step {n}: {mid.tag} against {before.tag} and {after.tag} by pairs")
            starts = self.out.engine_starts
            vs_before = self.compare(before, mid, BRACKET_MARGIN)
            # a midpoint is *same* as a bracket when shown nearer it than half the step: at the step
            # itself, equivalence to the wrong bracket is a coin the test may toss
            vs_after = self.compare(after, mid, BRACKET_MARGIN)
            ids = [c.comparison_id for c in self.out.comparisons[-2:]]
            if vs_before.pairs == 0 and vs_after.pairs == 0:
                side, why = "skipped", f"{mid.tag} gave no pair against either bracket (every run failed?)"
            else:
                side, why = pair_side(_verdict(vs_before), _verdict(vs_after))
                self.midpoints.append((mid.tag, vs_before, vs_after))
            search.record(i, side, why)
            cost = self.out.engine_starts - starts
            paid = (
                f"cost {-(-cost // 2)} pairs ({cost} engine starts), at most {2 * most_pairs(self.cap)}; "
                f"{self.out.pairs_spent} pairs spent"
                + (f" of at most {self.max_pairs}" if self.max_pairs is not None else "")
            )
            note = f"{why}; {_said(vs_before, before.tag)}; {_said(vs_after, after.tag)}; {paid}"
            self.progress(f"[{bid}] {mid.tag}: {side}: {note}")
            self.out.steps.append(
                BisectionStep(
                    bisection_id=bid,
                    step=n,
                    version=mid.tag,
                    partition_key=STEP_KEY_PREFIX + ",".join(ids),
                    run_id=None,
                    value=vs_before.ratio,
                    low=vs_before.low,
                    high=vs_before.high,
                    side=side,
                    note=note,
                    decided_at=self.now(),
                )
            )
        return search, False

    def between_brackets(self, up: bool) -> list[str]:
        """The midpoints shown between the brackets: *different* from both, on the way from one to
        the other in the range's direction (``up``: the release with the change is higher)."""
        return [
            tag
            for tag, vb, va in self.midpoints
            if vb.verdict == "different" and va.verdict == "different" and _up(vb) == up and _up(va) != up
        ]

    def locate(
        self,
        before: ComparedRelease,
        after: ComparedRelease,
        between: Sequence[ComparedRelease],
        up: bool,
    ) -> tuple[str, str, tuple[int, int] | None]:
        """Search ``between`` for the release of the change from ``before`` to ``after`` (``up``: its
        direction) and verify it against its predecessor: (status, words, the named release's place as
        an index into ``[before, *between, after]`` and its predecessor's, or None)."""
        chain = [before, *between, after]
        search, exhausted = self.search(before, after, between)
        if not search.found:
            status = "exhausted" if exhausted else "inconclusive"
            return self._drift_or(status, search.stopped or "every release left was skipped", up, chain)
        first = search.first_index() + 1  # in `chain`
        shows, without = chain[first], chain[first - 1]
        check = self.compare(without, shows)
        said = _said(check, without.tag)
        verified = self.out.comparisons[-1]
        if verified.scores_lower == "B" and verified.quality_b is not None:
            said += f"; on the evaluation set it {verified.quality_b.text()}: different (quality)"
        if check.verdict == "different" and _up(check) == up:
            return "found", f"{shows.tag} differs from {without.tag} ({said})", (first, first - 1)
        why = (
            f"the search narrowed to {shows.tag}, but compared with its predecessor directly it is "
            + (f"{check.verdict}" if check.verdict != "different" else "different the other way")
            + f" ({said}): not named"
        )
        return self._drift_or("inconclusive", why, up, chain)

    def _drift_or(
        self, status: str, why: str, up: bool, chain: Sequence[ComparedRelease]
    ) -> tuple[str, str, None]:
        lying = self.between_brackets(up)
        if not lying:
            return status, why, None
        return (
            "drift",
            f"a drift over the range {chain[0].tag}..{chain[-1].tag}, not one release: "
            f"{', '.join(lying)} lay between the brackets (different from both, on the way from one "
            f"to the other) and no single step carries the change ({why})",
            None,
        )


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
    max_pairs: int | None = None,
    second_step: bool = True,
    change_id: str | None = None,
    bisection: str | None = None,
    fingerprint: str = "",
    scenario: str = "",
    level: int = 0,
    progress: Progress = print,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> PairBisection:
    """Search ``between`` (the releases strictly between the brackets, in version order) for the
    release whose ``metric`` differs from its predecessor's by at least the ``target`` step, verify
    it, and look for a second step after it (``second_step``); see the module's docstring.

    ``max_steps``: the most midpoints one search decides (default: what a binary search over
    ``between`` needs; a skipped one does not count); each costs two comparisons of 3 to ``cap``
    pairs, two engine starts a pair. ``max_pairs``: the most pairs in all (None: no bound but
    :func:`pairs_bound`'s). ``bisection``: the id to store it under (the sensor's: the bisection the
    regressions asset started)."""
    started = now()
    bid = bisection or bisection_id(engine, metric, before.tag, after.tag, started)
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
            status="running",
            first_release=None,
            last_without=None,
            next_key=None,
            runs_used=0,
            max_runs=max_steps if max_steps is not None else runs_bound(len(between)),
            reason=None,
            started_at=started,
            updated_at=started,
        )
    )
    b = _Bisector(
        run_one, out, metric, host, engine, cap, target, seed, out.record.max_runs, max_pairs, progress, now
    )
    r = out.record
    try:
        r.status, r.reason = _bisect(b, before, after, list(between), second_step)
    except _OutOfPairs as e:
        r.status, r.reason = "exhausted", str(e) + _named_text(out)
    if out.named:
        r.first_release, r.last_without = out.named[0]
    r.runs_used, r.updated_at = out.engine_starts, now()
    r.reason = (
        f"{r.reason} ({len(out.steps)} steps, {len(out.comparisons)} comparisons, "
        f"{out.pairs_spent} pairs, {out.engine_starts} engine starts)"
    )
    progress(f"[{bid}] {r.status}: {r.reason}")
    return out


def _named_text(out: PairBisection) -> str:
    return "".join(f"; named so far: {s} (not {w})" for s, w in out.named)


def _bisect(
    b: _Bisector,
    before: ComparedRelease,
    after: ComparedRelease,
    between: list[ComparedRelease],
    second_step: bool,
) -> tuple[str, str]:
    brackets = b.compare(before, after)
    said = _said(brackets, before.tag)
    if brackets.verdict != "different" or brackets.ratio is None:
        return "inconclusive", f"the brackets compared by pairs: {after.tag} {said}: nothing to bisect"
    up = brackets.ratio > 1
    if not between:
        b.out.named.append((after.tag, before.tag))
        return "nothing_between", (
            f"no release between the brackets: {after.tag} differs from {before.tag} ({said})"
        )
    status, why, place = b.locate(before, after, between, up)
    if place is None:
        return status, why
    chain = [before, *between, after]
    shows, without = chain[place[0]], chain[place[1]]
    b.out.named.append((shows.tag, without.tag))
    if not second_step or shows is after:
        return status, why
    rest = b.compare(shows, after)
    if rest.verdict != "different" or rest.ratio is None:
        return status, f"{why}; no second step: {after.tag} {_said(rest, shows.tag)}"
    later = chain[place[0] + 1 : -1]
    if not later:
        b.out.named.append((after.tag, shows.tag))
        return (
            status,
            f"{why}; a second step: {after.tag} differs from {shows.tag} ({_said(rest, shows.tag)})",
        )
    status2, why2, place2 = b.locate(shows, after, later, rest.ratio > 1)
    if place2 is None:
        return status, f"{why}; a second step between {shows.tag} and {after.tag}: {status2}: {why2}"
    chain2 = [shows, *later, after]
    b.out.named.append((chain2[place2[0]].tag, chain2[place2[1]].tag))
    return status, f"{why}; a second step: {why2}"


def store(wh: Warehouse, found: PairBisection) -> None:
    """Every comparison the search ran, then the bisection with its steps (which name them)."""
    for result in found.comparisons:
        wh.save_comparison(*records(result))
    wh.save_bisection(found.record, found.steps)
