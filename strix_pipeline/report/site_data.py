"""Everything the report shows, read from the warehouse once (the SQL lives here)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from strix_pipeline.analysis.changepoints import Change
from strix_pipeline.analysis.changes import stored_changes
from strix_pipeline.analysis.charts import support_matrix_rows
from strix_pipeline.analysis.decision import (
    Decision,
    Wording,
    previous_decision,
    stored_decision,
    verdict_sentence,
    wording_of,
)
from strix_pipeline.config import StrixConfig
from strix_pipeline.report.extras import ChangeExtras, change_extras
from strix_pipeline.report.intervals import LEVEL_REQUESTS_SQL, add_intervals
from strix_pipeline.warehouse.unreadable import refuse_unreadable

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

log = logging.getLogger(__name__)

# every run with what its page shows: the command line, the fingerprint, the host's facts, the log tail
REPORT_RUNS_SQL = """
SELECT b.run_id, b.host, h.kind AS host_kind, b.engine, b.engine_kind, b.image, b.image_digest,
       b.image_version, b.version_order, b.model_profile, b.model, b.quantization, b.suite, b.profile,
       b.status, b.usable, b.failure_reason, b.started_at, b.ended_at, b.fingerprint, b.harness_version,
       b.engine_build, b.engine_flags, b.launch_command, b.rocm_version, b.kernel, b.firmware,
       r.kernel_cmdline, r.ttm_pages_limit, b.baseline_bytes, b.held_bytes, b.peak_bytes,
       b.after_stop_bytes, b.memory_returned, b.decode_efficiency, b.bandwidth_bytes_per_s,
       b.efficiency_problem, b.dagster_run_id, r.log_tail, r.engine_dtype
FROM v_run_base b
JOIN runs r ON r.run_id = b.run_id
LEFT JOIN hosts h ON h.name = b.host
WHERE b.started_at <= ?
ORDER BY b.started_at, b.run_id
"""
REPORT_AGGREGATES_SQL = """
SELECT run_id, scenario, level, level_kind, requests_ok, requests_failed, ttft_p50_ms, ttft_p95_ms,
       ttft_p95_ci_low_ms, ttft_p95_ci_high_ms, ttft_p99_ms, tpot_p50_ms, itl_p50_ms, itl_p99_ms,
       e2e_p50_ms, e2e_p95_ms, output_tokens_per_s, requests_per_s, goodput_requests_per_s,
       prefill_tokens_per_s, decode_tokens_per_s, stopped_reason, input_tokens_mean, output_tokens_total
FROM aggregates
ORDER BY run_id, scenario, level
"""
# llama-bench's two figures per request, measured ones only: prefill (input tokens / TTFT) and decode
# (tokens after the first / the time after it), their mean and spread over the repeats of a level
REPORT_BENCH_SQL = """
SELECT run_id, scenario, level, count(*) AS repeats, avg(input_tokens) AS input_tokens,
       avg(output_tokens) AS output_tokens,
       avg(input_tokens * 1000.0 / ttft_ms) AS pp_tok_s,
       stddev_samp(input_tokens * 1000.0 / ttft_ms) AS pp_std,
       avg(CASE WHEN output_tokens > 1 AND e2e_ms > ttft_ms
                THEN (output_tokens - 1) * 1000.0 / (e2e_ms - ttft_ms) END) AS tg_tok_s,
       stddev_samp(CASE WHEN output_tokens > 1 AND e2e_ms > ttft_ms
                        THEN (output_tokens - 1) * 1000.0 / (e2e_ms - ttft_ms) END) AS tg_std
FROM requests
WHERE ok AND NOT warmup AND ttft_ms > 0 AND scenario IN ('prefill_ladder', 'decode')
GROUP BY run_id, scenario, level
ORDER BY run_id, scenario, level
"""
# one row per evaluation: its verdict, in time order (the feed's verdict changes are read off it)
REPORT_VERDICTS_SQL = """
SELECT evaluation_id, min(evaluated_at) AS evaluated_at, min(host) AS host, min(verdict) AS verdict,
       bool_or(coalesce(provisional, false)) AS provisional
FROM decisions
WHERE evaluated_at <= ?
GROUP BY evaluation_id
ORDER BY evaluated_at, evaluation_id
"""
# when each support-matrix cell (host, engine, image version, model profile) was first tried
REPORT_CELLS_SQL = """
SELECT host, engine, image_version, model_profile, min(started_at) AS first_run_at
FROM v_run_base
WHERE started_at <= ?
GROUP BY host, engine, image_version, model_profile
"""


@dataclass(frozen=True)
class Evaluation:
    evaluation_id: str
    evaluated_at: datetime
    host: str
    verdict: str
    provisional: bool

    @property
    def label(self) -> str:
        return f"{self.verdict} (provisional)" if self.provisional else self.verdict


@dataclass
class ReportData:
    as_of: datetime
    timezone: str
    host: str  # the decision's host
    concurrency: int  # the decision's: the latest figures are read there
    decision: Decision | None
    previous: Decision | None  # the evaluation before `decision`
    evaluations: list[Evaluation]
    runs: list[dict[str, Any]]
    figures: dict[str, list[dict[str, Any]]]  # run_id -> its aggregates, with their levels' intervals
    matrix: list[dict[str, Any]]
    cells_first_run: dict[tuple[str, str, str | None, str], datetime]
    changes: list[Change]
    extras: dict[str, ChangeExtras] = field(default_factory=dict)
    bench: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # run_id -> REPORT_BENCH_SQL rows
    # the decision's two engines as the config names them: (candidate, baseline)
    engines: tuple[str, str] = ("vllm", "llamacpp")
    wording: Wording = field(default_factory=Wording)  # how the latest decision's sentence names its sides
    # evaluation id -> its one sentence (verdict_sentence): the latest decision's and each verdict change's
    sentences: dict[str, str] = field(default_factory=dict)
    _by_id: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    def run(self, run_id: str) -> dict[str, Any] | None:
        if len(self._by_id) != len(self.runs):
            self._by_id = {r["run_id"]: r for r in self.runs}
        return self._by_id.get(run_id)


def verdict_changes(evaluations: list[Evaluation]) -> list[tuple[Evaluation, str | None]]:
    """(evaluation, the label before it) for each evaluation whose verdict differs from the one before
    on its host (the first one too: before is None); the feed's entries, each with its sentence."""
    out: list[tuple[Evaluation, str | None]] = []
    last: dict[str, str] = {}
    for e in evaluations:
        before = last.get(e.host)
        last[e.host] = e.label
        if before != e.label:
            out.append((e, before))
    return out


def _sentences(
    wh: Warehouse,
    config: StrixConfig,
    latest: Decision | None,
    changes: list[Evaluation],
    versions: dict[str, Any],
) -> dict[str, str]:
    """evaluation id -> its one sentence: the latest decision's and each of ``changes``' (read back
    from the warehouse; an evaluation it no longer holds has none, and its feed entry says less)."""
    out = {}
    for e in changes:
        d = (
            latest
            if latest and latest.evaluation_id == e.evaluation_id
            else stored_decision(wh, e.evaluation_id)
        )
        if d is not None:
            out[e.evaluation_id] = verdict_sentence(d, wording_of(config, d, versions))
    if latest is not None:
        out[latest.evaluation_id] = verdict_sentence(latest, wording_of(config, latest, versions))
    return out


def _rows(wh: Warehouse, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    try:
        return list(wh.query_df(sql, params).iter_rows(named=True))
    except Exception as e:  # noqa: BLE001 - a part the warehouse cannot give is shown as missing
        refuse_unreadable(e)
        log.warning("report query failed: %s", e)
        return []


def gather(wh: Warehouse, config: StrixConfig, *, now: datetime | None = None) -> ReportData:
    as_of = now or datetime.now(UTC)
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=UTC)
    host = config.decision.host
    decision = previous_decision(wh, host, before=as_of + timedelta(microseconds=1))
    previous = previous_decision(wh, host, before=decision.evaluated_at) if decision else None
    figures: dict[str, list[dict[str, Any]]] = {}
    for a in _rows(wh, REPORT_AGGREGATES_SQL):
        figures.setdefault(a["run_id"], []).append(a)
    for run_id, aggregates in figures.items():  # one run's requests at a time
        add_intervals(aggregates, _rows(wh, LEVEL_REQUESTS_SQL, [run_id]))
    try:
        changes = [c for c in stored_changes(wh) if c.detected_at is None or c.detected_at <= as_of]
    except Exception as e:  # noqa: BLE001 - a warehouse without changes: none to show
        refuse_unreadable(e)
        log.warning("could not read stored changes: %s", e)
        changes = []
    runs = _rows(wh, REPORT_RUNS_SQL, [as_of])
    bench: dict[str, list[dict[str, Any]]] = {}
    for b in _rows(wh, REPORT_BENCH_SQL):
        bench.setdefault(b["run_id"], []).append(b)
    versions = {r["run_id"]: r["image_version"] for r in runs}
    evaluations = [Evaluation(**r) for r in _rows(wh, REPORT_VERDICTS_SQL, [as_of])]
    return ReportData(
        as_of=as_of,
        timezone=config.project.timezone,
        host=host,
        concurrency=config.decision.concurrency,
        decision=decision,
        previous=previous,
        evaluations=evaluations,
        runs=runs,
        figures=figures,
        matrix=support_matrix_rows(wh),
        cells_first_run={
            (r["host"], r["engine"], r["image_version"], r["model_profile"]): r["first_run_at"]
            for r in _rows(wh, REPORT_CELLS_SQL, [as_of])
        },
        changes=changes,
        extras=change_extras(wh),
        bench=bench,
        engines=(config.decision.candidate_engine, config.decision.baseline_engine),
        wording=wording_of(config, decision, versions),
        sentences=_sentences(wh, config, decision, [e for e, _ in verdict_changes(evaluations)], versions),
    )
