"""What a trace asks of a server, in the figures `strix workload import` prints and the warehouse keeps:
length percentiles, arrival rate, the concurrency it was served at (when the file says how long each
request took) and how much of its input is a prefix another request sent before."""

from __future__ import annotations

import math
from dataclasses import dataclass

from strix_pipeline.traces.model import Trace

PERCENTILES = (50, 90, 99)


def percentile(values: list[int], q: float) -> float:
    """The nearest-rank percentile (a value the trace holds, never an interpolation)."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)])


@dataclass(frozen=True)
class TraceSummary:
    requests: int
    input_p50: float
    input_p90: float
    input_p99: float
    input_max: int
    output_p50: float
    output_p90: float
    output_p99: float
    output_max: int
    span_s: float | None  # first to last arrival; None without arrival times
    rate_per_s: float | None  # mean arrival rate over that span
    concurrency_mean: float | None  # requests in flight, from arrivals + recorded serving times
    concurrency_peak: int | None
    prefix_reuse: float  # share of input tokens in a prefix block some earlier request sent too


def concurrency(trace: Trace) -> tuple[float | None, int | None]:
    """(mean, peak) requests in flight, when every request has an arrival and a serving time."""
    reqs = trace.requests
    if not trace.has_arrivals or any(r.duration_s is None for r in reqs):
        return None, None
    spans = [(r.arrival_s or 0.0, (r.arrival_s or 0.0) + (r.duration_s or 0.0)) for r in reqs]
    # an end before a start at the same instant
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    span = events[-1][0] - events[0][0]
    busy = sum(r.duration_s or 0.0 for r in reqs)
    return (busy / span if span > 0 else float(peak)), peak


def prefix_reuse(trace: Trace) -> float:
    """Input tokens in blocks already sent by an earlier request, over all input tokens."""
    seen: set[int] = set()
    reused = total = 0
    b = trace.block_tokens
    for r in trace.requests:
        total += r.input_tokens
        for j, block in enumerate(r.prefix_blocks):
            if block in seen:
                reused += max(0, min(b, r.input_tokens - j * b))
            seen.add(block)
    return reused / total if total else 0.0


def summarise(trace: Trace) -> TraceSummary:
    ins = [r.input_tokens for r in trace.requests]
    outs = [r.output_tokens for r in trace.requests]
    span = rate = None
    if trace.has_arrivals:
        times = [r.arrival_s or 0.0 for r in trace.requests]
        span = max(times) - min(times)
        rate = (len(times) - 1) / span if span > 0 else None
    c_mean, c_peak = concurrency(trace)
    return TraceSummary(
        len(ins),
        *(percentile(ins, q) for q in PERCENTILES),
        max(ins),
        *(percentile(outs, q) for q in PERCENTILES),
        max(outs),
        span,
        rate,
        c_mean,
        c_peak,
        prefix_reuse(trace),
    )
