"""The decision's two engines side by side, one metric a row: the baseline's figure, the candidate's,
the change in per cent (with the decision's interval where it has one) and the workload each figure
was measured on. No percentile is printed for a level too small for it (:mod:`.workload`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strix_pipeline.analysis.decision import engine_name
from strix_pipeline.records import CriterionResult
from strix_pipeline.report.intervals import interval_of
from strix_pipeline.report.markup import esc, memory, number
from strix_pipeline.report.page_parts import figure, run_link
from strix_pipeline.report.site_data import ReportData
from strix_pipeline.report.workload import min_requests, too_few, workload_text

SWEEP = "concurrency_sweep"


@dataclass(frozen=True)
class Metric:
    label: str  # "{n}" is the decision's concurrency
    scenario: str
    column: str
    unit: str
    lower_is_better: bool = True
    percentile: float | None = None  # printed only where the level has enough requests
    at_decision_level: bool = True  # the sweep's decision concurrency; else the scenario's last level


METRICS = (
    Metric("TTFT p50 at {n} clients", SWEEP, "ttft_p50_ms", "ms", percentile=50),
    Metric("TTFT p95 at {n} clients", SWEEP, "ttft_p95_ms", "ms", percentile=95),
    Metric("TTFT p99 at {n} clients", SWEEP, "ttft_p99_ms", "ms", percentile=99),
    Metric("ITL p50 at {n} clients", SWEEP, "itl_p50_ms", "ms", percentile=50),
    Metric("ITL p99 at {n} clients", SWEEP, "itl_p99_ms", "ms", percentile=99),
    Metric("TPOT p50 at {n} clients", SWEEP, "tpot_p50_ms", "ms", percentile=50),
    Metric("E2E p95 at {n} clients", SWEEP, "e2e_p95_ms", "ms", percentile=95),
    Metric("output throughput at {n} clients", SWEEP, "output_tokens_per_s", "tok/s", False),
    Metric("requests/s at {n} clients", SWEEP, "requests_per_s", "req/s", False),
    Metric("decode, one stream", "decode", "decode_tokens_per_s", "tok/s", False, at_decision_level=False),
)


@dataclass(frozen=True)
class MetricRow:
    metric: str
    workload: str
    baseline: str
    candidate: str
    change: str  # "+12 % (worse)"; "–" without both figures
    interval: str  # the change's 95 % interval where the decision has one, else "–"


def decision_pair(data: ReportData) -> tuple[str, str] | None:
    """(candidate run, baseline run): the deciding match-up's C3 evidence, else C5's, else the newest
    usable run of each engine on the decision host."""
    d = data.decision
    for cid in ("C3", "C5"):
        c = next((c for c in d.criteria if c.criterion == cid), None) if d else None
        if c is not None and len(c.evidence_run_ids) == 2 and all(data.run(r) for r in c.evidence_run_ids):
            return c.evidence_run_ids[0], c.evidence_run_ids[1]
    newest: dict[str, str] = {}
    for r in data.runs:  # oldest first
        if r["host"] == data.host and r["usable"]:
            newest[r["engine"]] = r["run_id"]
    cand, base = data.engines
    if cand in newest and base in newest:
        return newest[cand], newest[base]
    return None


def _c3(data: ReportData, pair: tuple[str, str]) -> CriterionResult | None:
    d = data.decision
    c = next((c for c in d.criteria if c.criterion == "C3"), None) if d else None
    return c if c is not None and tuple(c.evidence_run_ids) == pair else None


def _change(c: float | None, b: float | None, lower_is_better: bool) -> str:
    if c is None or b is None or b == 0:
        return "–"
    pct = (c - b) / b * 100
    if abs(pct) < 0.05:
        return "0 %"
    word = "better" if (pct < 0) == lower_is_better else "worse"
    if c / b >= 2:  # a ratio reads better than "+1220 %"
        return f"{c / b:.1f}× ({word})"
    return f"{pct:+.1f} % ({word})"


def _cell(agg: dict[str, Any] | None, m: Metric) -> tuple[str, float | None]:
    """A side's figure as text, and the number the change is computed from (None: none to compare)."""
    if agg is None or agg.get(m.column) is None:
        return "–", None
    v = float(agg[m.column])
    if m.percentile is not None:
        why = too_few(m.percentile, agg.get("requests_ok"))
        if why:
            return why, None
    text = number(v, m.unit, 0 if m.unit == "ms" else 1)
    if m.column == "ttft_p95_ms" and agg.get("ttft_p95_ci_low_ms") is not None:
        text += f" (95 % CI {agg['ttft_p95_ci_low_ms']:,.0f}–{agg['ttft_p95_ci_high_ms']:,.0f})"
    interval = interval_of(agg, m.column)  # TTFT p99, ITL p50 and p99: from the level's requests
    if interval is not None:
        text = interval.text(v, m.unit)
    return text, v


def _workload(c: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    wc, wb = workload_text(c), workload_text(b)
    return wc if wc == wb else f"candidate: {wc}; baseline: {wb}"


def side_by_side_rows(data: ReportData, pair: tuple[str, str]) -> list[MetricRow]:
    cand, base = pair
    n = data.concurrency
    rows = []
    c3 = _c3(data, pair)
    for m in METRICS:
        level = n if m.at_decision_level else None
        ca, ba = figure(data, cand, m.scenario, level), figure(data, base, m.scenario, level)
        if ca is None and ba is None:
            continue
        (ct, cv), (bt, bv) = _cell(ca, m), _cell(ba, m)
        if cv is None and bv is None and ct == bt == "–":
            continue
        interval = "–"
        if m.column == "ttft_p95_ms" and c3 is not None and c3.ci_low is not None and c3.ci_high is not None:
            interval = f"{(c3.ci_low - 1) * 100:+.0f} % to {(c3.ci_high - 1) * 100:+.0f} % (C3)"
        rows.append(
            MetricRow(
                m.label.format(n=n), _workload(ca, ba), bt, ct, _change(cv, bv, m.lower_is_better), interval
            )
        )
    held_c, held_b = (data.run(cand) or {}).get("held_bytes"), (data.run(base) or {}).get("held_bytes")
    if held_c is not None or held_b is not None:
        rows.append(
            MetricRow(
                "memory held after load",
                "idle, after load",
                memory(held_b),
                memory(held_c),
                _change(held_c, held_b, True),
                "–",
            )
        )
    return rows


COLUMNS = ("metric", "workload", "baseline", "candidate", "change", "95 % interval")


def side_by_side_html(data: ReportData) -> str:
    """The section's table (cards on a phone, as the criteria are), or "" without a pair of runs."""
    pair = decision_pair(data)
    if pair is None:
        return ""
    cand, base = pair
    rc, rb = data.run(cand) or {}, data.run(base) or {}
    names = (
        f"{engine_name(rb.get('engine', ''))} {rb.get('image_version') or ''}".strip(),
        f"{engine_name(rc.get('engine', ''))} {rc.get('image_version') or ''}".strip(),
    )
    head = [*COLUMNS]
    head[2], head[3] = f"baseline: {names[0]}", f"candidate: {names[1]}"
    body = []
    for r in side_by_side_rows(data, pair):
        cells = [
            esc(r.metric),
            esc(r.workload),
            esc(r.baseline),
            esc(r.candidate),
            esc(r.change),
            esc(r.interval),
        ]
        tds = "".join(
            f"<td data-label='{esc(h)}' class='c-{i}'>{c}</td>"
            for i, (h, c) in enumerate(zip(head, cells, strict=True))
        )
        body.append(f"<tr>{tds}</tr>")
    ths = "".join(f"<th scope='col' class='c-{i}'>{esc(h)}</th>" for i, h in enumerate(head))
    return (
        "<section id='side-by-side' aria-labelledby='side-by-side-h'>"
        "<h2 id='side-by-side-h'>The two engines side by side</h2>"
        f"<p class='muted'>Runs {run_link(data, base)} (baseline) and {run_link(data, cand)} (candidate), "
        "the decision's evidence. Change: candidate against baseline. A percentile is printed only where "
        f"its level has enough requests (p95: {min_requests(95)}, p99: {min_requests(99)}): at least one "
        "request must lie above it.</p>"
        f"<table class='criteria sidebyside'><thead><tr>{ths}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
        "</section>"
    )
