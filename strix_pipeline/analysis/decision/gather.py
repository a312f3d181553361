"""The evidence and the history from the warehouse (the SQL), and :func:`evaluate`, which judges them.

Everything is read as it stood at ``now``: runs that ended by then, images first seen by then,
evaluations before it -- so a past evaluation can be replayed (:mod:`.replay`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from strix_pipeline.analysis.decision.evidence import (
    Evidence,
    PairedTtft,
    ReleaseImage,
    RequestOutcome,
    RunFacts,
    SweepReading,
)
from strix_pipeline.analysis.decision.outcome import Decision
from strix_pipeline.analysis.decision.verdict import judge
from strix_pipeline.config import ScenarioProfile, StrixConfig
from strix_pipeline.quality.items import set_version

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

# Only the two engines the criteria compare, and nothing after `now` (the criteria ignore both): on five
# years of weekly runs of three engines this is a third fewer rows to read. Likewise only the
# aggregates the criteria read (smoke, and the sweep at the decision concurrency).
# A run counts once it ended by `now` (its rows are loaded after it ends): what an evaluation at `now`
# could see, so a replay of it sees the same.
# The host state C3 / C5 pair on, the environments C1 reads and C5's breakdown are taken from `runs`
# beside the view.
DECISION_RUNS_SQL = (
    "SELECT b.*, r.kernel_cmdline, r.ttm_pages_limit, r.engine_env, r.image_env, "
    "r.weights_bytes, r.kv_cache_bytes, r.kv_capacity_tokens, r.production_pool_bytes "
    "FROM v_run_base b JOIN runs r USING (run_id) "
    "WHERE b.host = ? AND b.started_at <= ? AND coalesce(b.ended_at, b.started_at) <= ? "
    "AND b.engine IN (?, ?)"
)
DECISION_AGGREGATES_SQL = """
SELECT run_id, scenario, level, level_kind, requests_ok, requests_failed, duration_s,
       ttft_p95_ms, ttft_p95_ci_low_ms, ttft_p95_ci_high_ms
FROM v_run_aggregates
WHERE host = ? AND engine IN (?, ?)
  AND (scenario IN ('smoke', 'trace') OR (scenario = 'concurrency_sweep' AND level IN (?, ?)))
"""
DECISION_IMAGES_SQL = (
    "SELECT repository, tag, digest, floating, version, sort_key, gone FROM images "
    "WHERE engine = ? AND first_seen <= ?"
)
# The raw TTFTs C3's interval is computed from: every measured (not warm-up) request, a failed or
# timed-out one as NULL -- C3 counts it as the run's request timeout, never drops it.
DECISION_TTFT_SQL = """
SELECT CASE WHEN ok THEN ttft_ms END AS ttft_ms FROM requests
WHERE run_id = ? AND scenario = 'concurrency_sweep' AND level = ? AND NOT warmup
  AND (NOT ok OR ttft_ms IS NOT NULL)
ORDER BY request_index
"""
# What the SLO criterion (C6) reads of each measured request at the SLOs' load, failures included:
# the scenario, and the level and its kind unless the load is "trace" (the run's replay, any level).
DECISION_SLO_REQUESTS_SQL = """
SELECT ok, ttft_ms, e2e_ms, output_tokens FROM requests
WHERE run_id = ? AND scenario = ? AND (? OR (level = ? AND level_kind = ?)) AND NOT warmup
ORDER BY request_index
"""
# C7's answers: the current evaluation set's, of the two engines' runs on the decision host.
DECISION_QUALITY_SQL = """
SELECT q.run_id, q.item_id, q.passed FROM quality_answers q JOIN runs r USING (run_id)
WHERE r.host = ? AND r.engine IN (?, ?) AND q.set_version = ?
"""
# Evaluations strictly before this one: a replay at a stored evaluated_at does not see itself.
DECISION_HISTORY_SQL = """
SELECT evaluation_id, evaluated_at, verdict, criterion, status
FROM decisions WHERE host = ? AND evaluated_at < ? ORDER BY evaluated_at
"""


def query_rows(wh: Warehouse, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    return list(wh.query_df(sql, params).iter_rows(named=True))


T = TypeVar("T")


def from_row(cls: type[T], row: Mapping[str, Any], **given: Any) -> T:
    """A record from a query row whose columns are named as its fields (``given`` overrides)."""
    return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row} | given)  # type: ignore[call-arg]


def run_facts(row: Mapping[str, Any], config: StrixConfig) -> RunFacts:
    """A ``v_run_base`` row as the criteria's record, with its request timeout: its profile's, or the
    default profile's when the configuration no longer names it."""
    profile = config.profiles.get(row.get("profile") or "") or ScenarioProfile()
    return from_row(RunFacts, row, usable=bool(row["usable"]), request_timeout_s=profile.request_timeout_s)


R = TypeVar("R")


class WarehouseRequests(Mapping[str, list[R]]):
    """Per run, its measured requests at one level (``sql``'s parameters after the run id: the level's)
    as ``convert`` makes them, read from table ``requests`` the first time a run's are asked for (a
    criterion compares two runs of many). A warehouse without raw requests gives none: no interval."""

    def __init__(
        self, wh: Warehouse, sql: str, params: Sequence[Any], convert: Callable[[dict[str, Any]], R]
    ) -> None:
        self._wh, self._sql, self._params, self._convert = wh, sql, list(params), convert
        self._cache: dict[str, list[R]] = {}

    def __getitem__(self, run_id: str) -> list[R]:
        if run_id not in self._cache:
            try:
                found = query_rows(self._wh, self._sql, [run_id, *self._params])
            except Exception:  # noqa: BLE001 - a warehouse without raw requests: no interval (n/a)
                found = []
            self._cache[run_id] = [self._convert(r) for r in found]
        return self._cache[run_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._cache)  # the runs read so far: the rest are read on demand

    def __len__(self) -> int:
        return len(self._cache)


def _ttft(row: dict[str, Any]) -> float | None:
    return None if row["ttft_ms"] is None else float(row["ttft_ms"])


def _outcome(row: dict[str, Any]) -> RequestOutcome:
    return from_row(RequestOutcome, row, ok=bool(row["ok"]))


def gather_evidence(wh: Warehouse, config: StrixConfig, now: datetime) -> Evidence:
    """The decision host's evidence as it stood at ``now`` (UTC-aware)."""
    d = config.decision
    runs = query_rows(wh, DECISION_RUNS_SQL, [d.host, now, now, d.candidate_engine, d.baseline_engine])
    load = d.slo_load
    levels = [d.concurrency, load.level or d.concurrency]
    aggs = query_rows(wh, DECISION_AGGREGATES_SQL, [d.host, d.candidate_engine, d.baseline_engine, *levels])
    sweeps = [a for a in aggs if a["scenario"] == "concurrency_sweep" and a["level_kind"] == "concurrency"]
    try:
        images = query_rows(wh, DECISION_IMAGES_SQL, [d.candidate_engine, now])
    except Exception:  # noqa: BLE001 - a warehouse without the images table: no image facts
        images = []
    window_start = now - timedelta(days=d.freshness_days)

    def newest(metric: str) -> dict[str, PairedTtft]:
        """Each match-up's newest fresh comparison by interleaved pairs of ``metric`` (C3's TTFT,
        C6's goodput, C5's memory: runner/engine_comparison.py, runner/box_pairs.py)."""
        found = wh.engine_comparisons(d.host, metric, window_start, until=now)
        return {matchup: from_row(PairedTtft, vars(rec)) for matchup, rec in found.items()}

    return Evidence(
        now=now,
        window_start=window_start,
        runs=tuple(run_facts(r, config) for r in runs),
        smoke_ok=frozenset(
            a["run_id"]
            for a in aggs
            if a["scenario"] == "smoke" and a["requests_ok"] >= 1 and a["requests_failed"] == 0
        ),
        sweep={a["run_id"]: from_row(SweepReading, a) for a in sweeps if a["level"] == d.concurrency},
        images=tuple(from_row(ReleaseImage, i) for i in images),
        ttfts=WarehouseRequests(wh, DECISION_TTFT_SQL, [d.concurrency], _ttft),
        paired_ttft=newest("ttft_p95_ms"),
        paired_goodput=newest("goodput_rps"),
        paired_memory=newest("held_bytes"),
        slo_sweep={
            a["run_id"]: from_row(SweepReading, a)
            for a in aggs
            if load.matches(a["scenario"], a["level"], a["level_kind"])
        },
        slo_requests=WarehouseRequests(
            wh,
            DECISION_SLO_REQUESTS_SQL,
            [load.scenario, load.kind == "trace", load.level or 0, load.kind],
            _outcome,
        ),
        quality=quality_answers(wh, config),
    )


def quality_answers(wh: Warehouse, config: StrixConfig) -> dict[str, dict[str, bool]]:
    """run id -> item id -> passed, for the current evaluation set (a warehouse older than the set:
    none, so C7 is not judged)."""
    d = config.decision
    try:
        rows = query_rows(
            wh, DECISION_QUALITY_SQL, [d.host, d.candidate_engine, d.baseline_engine, set_version()]
        )
    except Exception:  # noqa: BLE001 - a warehouse without the quality_answers table: no answers
        return {}
    out: dict[str, dict[str, bool]] = {}
    for r in rows:
        out.setdefault(r["run_id"], {})[r["item_id"]] = bool(r["passed"])
    return out


def history(wh: Warehouse, host: str, now: datetime) -> list[dict[str, Any]]:
    """The criterion rows of the evaluations on ``host`` before ``now``, oldest first."""
    try:
        return query_rows(wh, DECISION_HISTORY_SQL, [host, now])
    except Exception:  # noqa: BLE001 - an older warehouse without decisions: no history yet
        return []


def evaluate(
    wh: Warehouse,
    config: StrixConfig,
    *,
    now: datetime | None = None,
    evaluation_id: str | None = None,
) -> Decision:
    """Evaluate the criteria (C1-C5, and C6 with SLOs set) on the decision host; nothing is written
    (see Warehouse.save_decision).

    Everything is read as it stood at ``now``: runs that ended by then, images first seen by then,
    evaluations before it. ``evaluation_id``: the id to give it (a replay keeps the stored one).
    """
    now = now or datetime.now(UTC)
    if now.tzinfo is None:  # the warehouse stores UTC-aware times; a naive `now` means UTC
        now = now.replace(tzinfo=UTC)
    d = config.decision
    decision = judge(gather_evidence(wh, config, now), config)

    evaluations: dict[str, dict[str, str]] = {}
    stamps: dict[str, datetime] = {}
    verdicts: dict[str, str] = {}
    for h in history(wh, d.host, now):
        if h["evaluation_id"] == evaluation_id:
            continue
        evaluations.setdefault(h["evaluation_id"], {})[h["criterion"]] = h["status"]
        stamps[h["evaluation_id"]] = h["evaluated_at"]
        verdicts[h["evaluation_id"]] = h["verdict"]
    ordered = sorted(evaluations, key=lambda e: stamps[e])
    previous = ordered[-1] if ordered else None

    decision.evaluation_id = evaluation_id or f"{d.host}-{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    for r in decision.criteria:
        r.evaluation_id = decision.evaluation_id
        if r.status == "pass":
            # the start of the current unbroken run of passes
            held = now
            for e in reversed(ordered):
                if evaluations[e].get(r.criterion) != "pass":
                    break
                held = stamps[e]
            r.first_held_at = held
    decision.previous_verdict = verdicts[previous] if previous else None
    decision.previous_statuses = dict(evaluations[previous]) if previous else {}
    return decision


EVIDENCE_VERSIONS_SQL = "SELECT run_id, image_version FROM v_run_base WHERE list_contains(?, run_id)"


def evidence_versions(wh: Warehouse, decision: Decision) -> dict[str, str | None]:
    """run id -> image version of each run the decision's criteria cite (the sentence names them)."""
    ids = sorted({r for c in decision.criteria for r in c.evidence_run_ids})
    if not ids:
        return {}
    return {r["run_id"]: r["image_version"] for r in query_rows(wh, EVIDENCE_VERSIONS_SQL, [ids])}
