"""Every aggregate of a level, in one function, with each definition next to the code computing it.

Definitions (docs/bench-output.md, "Metric definitions"), over the non-warm-up requests of one level:
- TTFT, E2E: per request, from send; TPOT = (E2E - TTFT) / (output tokens - 1), requests with > 1 token.
- ITL: every gap between consecutive content events of a request, pooled over the level's requests;
  ITL per token: each such gap divided by the tokens the later event carried (known from the server,
  else output tokens / content events of that request).
- duration = last completion - first send (measured by the runner, failures included); throughput =
  sum of output tokens of successful requests / duration; req/s = successful requests / duration;
  goodput = successful requests meeting every SLO (TTFT, TPOT, E2E) / duration.
- Percentiles: linear interpolation (numpy's default, as vLLM's benchmark). The 95% CI of TTFT p95 is
  the distribution-free order-statistic interval (``stats.quantiles.quantile_ci``): [X(l), X(u)] of the sorted
  values with l, u from the binomial distribution of how many values fall below the true p95, so it
  covers the true p95 at least 95 % of the time whatever the latency distribution (checked by
  ``benchmarks/ci_coverage.py``). It needs n >= 72 values for a finite upper bound; with fewer it is
  None ("n/a"), never a bar drawn from too little data. (The percentile bootstrap it replaced covered
  the true p95 about 44 % of the time at n = 10 and 87 % at n = 40.)
- std: the population standard deviation (numpy's default, ddof=0, as vLLM's ``std_*_ms``); with
  ``count``, ``min`` and ``max`` it is in ``distributions`` (the ``--out`` JSON), not in the aggregate.
- total token throughput = (sum input + sum output tokens of successful requests) / duration.
- A failed request is counted in ``requests_failed``; it never contributes a latency, zero or other.
- prefill tok/s (ladder, prefix cache) = sum input tokens / sum TTFT; decode tok/s (decode) =
  sum (output tokens - 1) / sum (E2E - TTFT), i.e. 1000 / token-weighted TPOT.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from strix_pipeline.config import SLO
from strix_pipeline.records import LATENCY_METRICS, LATENCY_STATS, LevelAggregate, RequestRecord
from strix_pipeline.stats.quantiles import quantile_ci

PERCENTILES = (50, 90, 95, 99)


class Latencies(Protocol):
    """What the SLO rule reads of a request: a RequestRecord, or the decision's RequestOutcome."""

    @property
    def ok(self) -> bool: ...
    @property
    def ttft_ms(self) -> float | None: ...
    @property
    def e2e_ms(self) -> float | None: ...
    @property
    def output_tokens(self) -> int | None: ...


class Objectives(Protocol):
    """Per-request objectives in ms; None: no bound (the decision's SLOs may set any subset)."""

    @property
    def ttft_ms(self) -> float | None: ...
    @property
    def tpot_ms(self) -> float | None: ...
    @property
    def e2e_ms(self) -> float | None: ...


def tpot_ms(r: Latencies) -> float | None:
    if r.ttft_ms is None or r.e2e_ms is None or not r.output_tokens or r.output_tokens < 2:
        return None
    return (r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1)


def itl_gaps(r: RequestRecord) -> tuple[list[float], list[float]]:
    """(per-event gaps, per-token gaps) of one request, in ms."""
    ev = r.event_offsets_ms
    if len(ev) < 2:
        return [], []
    gaps = [b - a for a, b in zip(ev, ev[1:], strict=False)]
    if len(r.event_tokens) == len(ev):
        per_token = [g / max(1, n) for g, n in zip(gaps, r.event_tokens[1:], strict=True)]
    else:
        tokens_per_event = (r.output_tokens or len(ev)) / len(ev)
        per_token = [g / max(1.0, tokens_per_event) for g in gaps]
    return gaps, per_token


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    """The LATENCY_STATS of values (every one None when there are none, never 0)."""
    if not values:
        return dict.fromkeys(LATENCY_STATS)
    a = np.asarray(values, dtype=float)
    out: dict[str, float | None] = {"mean": float(a.mean())}
    for p, v in zip(PERCENTILES, np.percentile(a, PERCENTILES), strict=True):
        out[f"p{p}"] = float(v)
    return out


def percentile_key(p: float) -> str:
    """``p99``, ``p99.9``: vLLM's spelling of a percentile in its result keys (``p_word``)."""
    return "p" + (str(int(p)) if int(p) == p else str(p))


def value_stats(
    values: Sequence[float], percentiles: Sequence[float] = PERCENTILES
) -> dict[str, float | int | None]:
    """count, mean, std (population), min, max and the percentiles (``p50``, ``p99.9``, ...) of values;
    every statistic but ``count`` is None when there are no values (never 0)."""
    keys = [percentile_key(p) for p in percentiles]
    if not values:
        return {"count": 0, "mean": None, "std": None, "min": None, "max": None} | dict.fromkeys(keys)
    a = np.asarray(values, dtype=float)
    out: dict[str, float | int | None] = {
        "count": int(a.size),
        "mean": float(a.mean()),
        "std": float(a.std()),
        "min": float(a.min()),
        "max": float(a.max()),
    }
    for k, v in zip(keys, np.percentile(a, list(percentiles)), strict=True):
        out[k] = float(v)
    return out


def metric_values(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """Per-metric values of the measured requests: latencies over successful requests only (a failure
    never contributes a latency); ``queue`` over every measured request, as ``queue_mean_ms``."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    itl: list[float] = []
    itl_tok: list[float] = []
    for r in ok:
        g, gt = itl_gaps(r)
        itl += g
        itl_tok += gt
    return {
        "ttft": [r.ttft_ms for r in ok if r.ttft_ms is not None],
        "tpot": [t for t in (tpot_ms(r) for r in ok) if t is not None],
        "itl": itl,
        "itl_per_token": itl_tok,
        "e2e": [r.e2e_ms for r in ok if r.e2e_ms is not None],
        "queue": [r.queue_ms for r in measured],
    }


def distributions(records: Sequence[RequestRecord]) -> dict[str, dict[str, float | int | None]]:
    """``value_stats`` of every metric of ``metric_values`` (the ``--out`` JSON's std/min/max/count)."""
    return {name: value_stats(values) for name, values in metric_values(records).items()}


def token_totals(records: Sequence[RequestRecord]) -> tuple[int, int]:
    """(sum input tokens, sum output tokens) of the successful measured requests."""
    ok = [r for r in records if r.ok and not r.warmup]
    return sum(r.input_tokens or 0 for r in ok), sum(r.output_tokens or 0 for r in ok)


def total_tokens_per_s(records: Sequence[RequestRecord], duration_s: float | None) -> float | None:
    """(input + output tokens of successful requests) / duration, None without a duration."""
    if not duration_s or duration_s <= 0:
        return None
    n_in, n_out = token_totals(records)
    return (n_in + n_out) / duration_s


def meets_slo(r: Latencies, slo: Objectives) -> bool:
    """A successful request within every objective set (TPOT: when it has one, > 1 output token); a
    failure never meets them."""
    if not r.ok or r.ttft_ms is None or r.e2e_ms is None:
        return False
    t = tpot_ms(r)
    return (
        (slo.ttft_ms is None or r.ttft_ms <= slo.ttft_ms)
        and (slo.e2e_ms is None or r.e2e_ms <= slo.e2e_ms)
        and (t is None or slo.tpot_ms is None or t <= slo.tpot_ms)
    )


def aggregate_level(
    records: Sequence[RequestRecord],
    *,
    run_id: str,
    scenario: str,
    level: int,
    level_kind: str,
    slo: SLO,
    duration_s: float | None = None,
    requested_rate: float | None = None,
    planned: int | None = None,
    stopped_reason: str | None = None,
) -> LevelAggregate:
    """Aggregate one level. ``duration_s``: wall time first send -> last completion, failures included;
    when None it is taken from the successful requests (first send -> last content event).
    ``planned``: the measured requests the level set out to send; ``stopped_reason``: why it sent fewer."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    agg = LevelAggregate(
        run_id=run_id,
        scenario=scenario,
        level=level,
        level_kind=level_kind,
        requests_ok=len(ok),
        requests_failed=len(measured) - len(ok),
        duration_s=duration_s,
        requested_rate=requested_rate,
        requests_planned=planned,
        stopped_reason=stopped_reason,
    )
    if duration_s is None and ok:
        first = min(r.sent_offset_ms for r in measured)
        last = max(r.sent_offset_ms + (r.e2e_ms or 0.0) for r in ok)
        agg.duration_s = duration_s = (last - first) / 1000
    if measured:
        queues = [r.queue_ms for r in measured]
        agg.queue_mean_ms = float(np.mean(queues))
        agg.queue_p95_ms = float(np.percentile(queues, 95))
    if requested_rate is not None and len(measured) > 1:
        sends = sorted(r.sent_offset_ms for r in measured)
        span = (sends[-1] - sends[0]) / 1000
        agg.achieved_rate = (len(sends) - 1) / span if span > 0 else None

    values = metric_values(measured)
    for name in LATENCY_METRICS:
        for stat, v in _stats(values[name]).items():
            setattr(agg, f"{name}_{stat}_ms", v)
    agg.ttft_p95_ci_low_ms, agg.ttft_p95_ci_high_ms = quantile_ci(values["ttft"])

    inputs = [r.input_tokens for r in ok if r.input_tokens is not None]
    agg.input_tokens_mean = float(np.mean(inputs)) if inputs else None
    outputs = [r.output_tokens or 0 for r in ok]
    agg.output_tokens_total = int(sum(outputs)) if ok else None
    agg.output_tokens_estimated = any(r.output_tokens_estimated for r in ok)
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    agg.cached_tokens_mean = float(np.mean(cached)) if cached else None

    if duration_s and duration_s > 0:
        agg.output_tokens_per_s = sum(outputs) / duration_s
        agg.requests_per_s = len(ok) / duration_s
        agg.goodput_requests_per_s = sum(meets_slo(r, slo) for r in ok) / duration_s

    if level_kind in ("input_tokens", "phase"):
        agg.prefill_tokens_per_s = prefill_tokens_per_s(ok)
    if scenario == "decode":
        agg.decode_tokens_per_s = decode_tokens_per_s(ok)
    return agg


# The two throughput figures, defined once: the weekly series, its charts and change points read them
# from the level aggregates above, and a comparison by pairs computes each run's figure with the very
# same function (runner/pair_runs.py), so a pair bisection measures the quantity the series moved in.


def prefill_tokens_per_s(records: Sequence[RequestRecord]) -> float | None:
    """Σ input tokens / Σ TTFT over the successful measured requests with both (None without any):
    a long prompt weighs as much as its tokens, and a single fast request cannot carry the figure."""
    pairs = [
        (r.input_tokens, r.ttft_ms) for r in records if r.ok and not r.warmup and r.input_tokens and r.ttft_ms
    ]
    ttft_sum = sum(t for _, t in pairs)
    return sum(n for n, _ in pairs) / (ttft_sum / 1000) if ttft_sum > 0 else None


def decode_tokens_per_s(records: Sequence[RequestRecord]) -> float | None:
    """Σ (output tokens - 1) / Σ (E2E - TTFT) over the successful measured requests with more than one
    output token (None without any): 1000 / token-weighted TPOT, the mean speed of the run's decodes."""
    dec = [
        (r.output_tokens - 1, r.e2e_ms - r.ttft_ms)
        for r in records
        if r.ok
        and not r.warmup
        and r.output_tokens
        and r.output_tokens > 1
        and r.e2e_ms is not None
        and r.ttft_ms is not None
    ]
    span = sum(ms for _, ms in dec)
    return sum(n for n, _ in dec) / (span / 1000) if span > 0 else None
