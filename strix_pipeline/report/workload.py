"""What a figure was measured on, said beside it: input and output tokens, clients and requests; and
the rule for when a level has enough requests for a percentile to be printed at all."""

from __future__ import annotations

import math
from typing import Any

from strix_pipeline.report.markup import with_interval


def min_requests(p: float) -> int:
    """The fewest requests for which a p-th percentile is more than the sample's largest value: at
    least one request must lie above it (p95: 20, p99: 100, p50: 2)."""
    return math.ceil(100 / (100 - p))


def too_few(p: float, n: int | None) -> str:
    """Why no p-th percentile is printed for a level of ``n`` requests ("" when it has enough)."""
    need = min_requests(p)
    if n is not None and n >= need:
        return ""
    n = n or 0
    return f"no p{p:g}: {n} request{'s' if n != 1 else ''}, a p{p:g} needs {need}"


def percentile_text(
    value: float | None,
    p: float,
    n: int | None,
    unit: str,
    low: float | None = None,
    high: float | None = None,
) -> str:
    """The percentile with its interval, or, for a level too small for it, why there is none."""
    return too_few(p, n) or with_interval(value, low, high, unit)


def clients_of(agg: dict[str, Any]) -> int:
    """The clients a level ran with: the sweep's level is its concurrency; every other scenario runs one."""
    return int(agg["level"]) if agg["scenario"] == "concurrency_sweep" else 1


def workload_text(agg: dict[str, Any] | None) -> str:
    """``1,502 in / 256 out tokens · 5 clients · 20 requests``: the level a figure comes from."""
    if agg is None:
        return "–"
    n = int(agg.get("requests_ok") or 0)
    parts = []
    tokens_in = agg.get("input_tokens_mean")
    total_out = agg.get("output_tokens_total")
    if tokens_in is not None or total_out is not None:
        out = f"{total_out / n:,.0f}" if total_out is not None and n else "?"
        parts.append(
            f"{tokens_in:,.0f} in / {out} out tokens" if tokens_in is not None else f"{out} out tokens"
        )
    clients = clients_of(agg)
    parts.append(f"{clients} client{'s' if clients != 1 else ''}")
    parts.append(f"{n} request{'s' if n != 1 else ''}")
    failed = int(agg.get("requests_failed") or 0)
    if failed:
        parts.append(f"{failed} failed")
    return " · ".join(parts)
