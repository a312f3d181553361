"""A strix level written in the shape of ``vllm bench serve --save-result``'s JSON.

The key names, their order and which keys appear for which flags follow vLLM's
``vllm/benchmarks/serve.py`` (``main_async``: the setup, metadata and traffic keys; ``benchmark``: the
result keys and ``process_one_metric``: ``mean_/median_/std_/pNN_<metric>_ms`` for each metric of
``--percentile-metrics`` at each of ``--metric-percentiles``; ``compute_result_filename``: the file
name). The values are strix's measurements, with strix's definitions where the two differ
(docs/bench-output.md, "vLLM-format results"):

- TTFT is send -> first event with non-empty content (vLLM: the first event with ``choices``, a
  role-only first event included); duration is first send -> last completion (vLLM: from before the
  first send to after the last response); a statistic with no data is ``null`` (vLLM writes 0), and a
  failed request's entry in ``latencies`` is ``null`` (vLLM: 0.0), never a latency of zero.
- ``client_queue_time`` is strix's queue time: waiting for a free client in a closed loop, behind
  schedule (a wait for a ``--max-concurrency`` slot included) in an open loop. vLLM counts a closed
  loop's requests as all arriving at time 0, so its queue times grow through the run.
- ``max_output_tokens_per_s`` counts tokens per one-second bucket (the tokens each event carried);
  vLLM counts events, the same when every event carries one token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from strix_pipeline.loadgen.metrics import metric_values, percentile_key, token_totals, tpot_ms
from strix_pipeline.records import LevelAggregate, RequestRecord

# vLLM's --backend values for generation against an OpenAI-compatible server, and the endpoint
# suffix each one checks (endpoint_request_func.py: ASYNC_REQUEST_FUNCS, _validate_api_url).
BACKENDS = {"openai": "completions", "vllm": "completions", "openai-chat": "chat/completions"}
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
DEFAULT_PERCENTILE_METRICS = "ttft,tpot,itl"  # vLLM's default for generative models
DEFAULT_METRIC_PERCENTILES = "99"
GOODPUT_METRICS = ("ttft", "tpot", "e2el")


@dataclass
class VllmOptions:
    """What ``vllm bench serve`` records about its run, as strix ran it."""

    backend: str = "openai"
    label: str | None = None
    model_id: str = ""
    tokenizer_id: str | None = None
    num_prompts: int = 0
    metadata: list[tuple[str, str]] = field(default_factory=list)
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    goodput: dict[str, float] = field(default_factory=dict)  # ms, by vLLM's names ttft/tpot/e2el
    percentile_metrics: list[str] = field(default_factory=lambda: DEFAULT_PERCENTILE_METRICS.split(","))
    metric_percentiles: list[float] = field(default_factory=lambda: [99.0])
    date: str = field(default_factory=lambda: datetime.now().strftime("%Y%m%d-%H%M%S"))


def parse_metadata(items: Sequence[str] | None) -> list[tuple[str, str]]:
    """``--metadata KEY=VALUE ...`` as vLLM reads it (split at the first ``=``, both sides stripped)."""
    out = []
    for item in items or ():
        if "=" not in item:
            raise ValueError(f"--metadata {item!r}: use KEY=VALUE")
        k, v = item.split("=", 1)
        out.append((k.strip(), v.strip()))
    return out


def parse_goodput(items: Sequence[str] | None) -> dict[str, float]:
    """``--goodput ttft:MS tpot:MS e2el:MS`` (any subset) as vLLM reads it; values must be positive."""
    out: dict[str, float] = {}
    for item in items or ():
        name, sep, value = item.partition(":")
        try:
            ms = float(value) if sep and ":" not in value else None
        except ValueError:
            ms = None
        if ms is None:
            raise ValueError(f'--goodput {item!r}: use "KEY:VALUE" pairs, the value in milliseconds')
        if name not in GOODPUT_METRICS:
            raise ValueError(f"--goodput {item!r}: the metric must be one of {', '.join(GOODPUT_METRICS)}")
        if not ms > 0 or math.isinf(ms):
            raise ValueError(f"--goodput {item!r}: the value must be a positive number of milliseconds")
        out[name] = ms
    return out


def parse_percentile_metrics(text: str | None) -> list[str]:
    names = [n.strip() for n in (text or DEFAULT_PERCENTILE_METRICS).split(",") if n.strip()]
    bad = [n for n in names if n not in PERCENTILE_METRICS]
    if bad or not names:
        raise ValueError(
            f"--percentile-metrics: unknown {', '.join(bad) or '(empty)'} (known: "
            f"{', '.join(PERCENTILE_METRICS)})"
        )
    return names


def parse_metric_percentiles(text: str | None) -> list[float]:
    try:
        ps = [float(p) for p in (text or DEFAULT_METRIC_PERCENTILES).split(",") if p.strip()]
    except ValueError:
        raise ValueError(f"--metric-percentiles: expected comma-separated numbers, got {text!r}") from None
    if not ps or any(not 0 <= p <= 100 for p in ps):
        raise ValueError(f"--metric-percentiles: expected numbers in [0, 100], got {text!r}")
    return ps


def result_filename(opts: VllmOptions, result_dir: str | None, filename: str | None) -> Path:
    """vLLM's ``compute_result_filename``: ``{label}-{rate}qps[-concurrency{N}]-{model}-{date}.json``."""
    rate = str(float(opts.request_rate))  # vLLM formats its float argument: "inf", "10.0"
    conc = f"-concurrency{opts.max_concurrency}" if opts.max_concurrency is not None else ""
    name = filename or (
        f"{opts.label or opts.backend}-{rate}qps{conc}-{opts.model_id.split('/')[-1]}-{opts.date}.json"
    )
    return Path(result_dir) / name if result_dir else Path(name)


def _good(r: RequestRecord, goodput: Mapping[str, float]) -> bool:
    values = {"ttft": r.ttft_ms, "e2el": r.e2e_ms, "tpot": tpot_ms(r) or 0.0}  # vLLM: tpot 0 if <= 1 token
    return all(values[k] is not None and values[k] <= slo for k, slo in goodput.items())  # type: ignore[operator]


def _peaks(ok: Sequence[RequestRecord]) -> tuple[float, int]:
    """(max output tokens in any one-second bucket from the first send, peak requests in flight)."""
    if not ok:
        return 0.0, 0
    starts = [r.sent_offset_ms / 1000 for r in ok]
    ends = [s + (r.e2e_ms or 0.0) / 1000 for s, r in zip(starts, ok, strict=True)]
    t0 = min(starts)
    buckets = np.zeros(int(np.ceil(max(ends) - t0)) + 1)
    for s, r in zip(starts, ok, strict=True):
        ev = r.event_offsets_ms
        if not ev:
            continue
        if len(r.event_tokens) == len(ev):
            per_event: list[float] = [float(n) for n in r.event_tokens]
        else:
            per_event = [(r.output_tokens or len(ev)) / len(ev)] * len(ev)
        for off, n in zip(ev, per_event, strict=True):
            b = int(s + off / 1000 - t0)
            if 0 <= b < buckets.size:
                buckets[b] += n
    events = sorted([(s, 1) for s in starts] + [(e, -1) for e in ends])  # a departure before an arrival
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return float(buckets.max()), peak


def vllm_result(records: Sequence[RequestRecord], agg: LevelAggregate, opts: VllmOptions) -> dict[str, Any]:
    """The vLLM result JSON of one level (``records``: that level's requests, warm-ups are skipped)."""
    measured = sorted((r for r in records if not r.warmup), key=lambda r: r.request_index)
    ok = [r for r in measured if r.ok]
    dur = agg.duration_s or 0.0
    n_in, n_out = token_totals(measured)

    def per_s(n: float) -> float | None:
        return n / dur if dur > 0 else None

    doc: dict[str, Any] = {
        "date": opts.date,
        "endpoint_type": opts.backend,  # vLLM keeps both for backward compatibility
        "backend": opts.backend,
        "label": opts.label,
        "model_id": opts.model_id,
        "tokenizer_id": opts.tokenizer_id if opts.tokenizer_id is not None else opts.model_id,
        "num_prompts": opts.num_prompts,
    }
    doc |= dict(opts.metadata)
    doc |= {
        "request_rate": opts.request_rate if opts.request_rate < math.inf else "inf",
        "burstiness": opts.burstiness,
        "max_concurrency": opts.max_concurrency,
    }
    peak_tokens, peak_requests = _peaks(ok)
    doc |= {
        "duration": agg.duration_s,
        "completed": len(ok),
        "failed": len(measured) - len(ok),
        "total_input_tokens": n_in,
        "total_output_tokens": n_out,
        "request_throughput": per_s(len(ok)),
        "request_goodput": per_s(sum(_good(r, opts.goodput) for r in ok)) if opts.goodput else None,
        "output_throughput": per_s(n_out),
        "total_token_throughput": per_s(n_in + n_out),
        # vLLM keeps these two per-request lists (in seconds) even without --save-detailed
        "latencies": [r.e2e_ms / 1000 if r.ok and r.e2e_ms is not None else None for r in measured],
        "queue_times": [r.queue_ms / 1000 for r in measured],
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
        "rtfx": 0.0,  # audio only
    }
    values = metric_values(measured)
    series: dict[str, list[float]] = {
        "ttft": values["ttft"],
        "tpot": values["tpot"],
        "itl": values["itl"],
        "e2el": values["e2e"],
    }
    if opts.max_concurrency is not None:  # vLLM reports queue statistics only with --max-concurrency
        series["client_queue_time"] = [r.queue_ms for r in ok]
        if opts.request_rate < math.inf:
            series["e2el_including_client_queue"] = [
                (r.e2e_ms or 0.0) + r.queue_ms for r in ok if r.e2e_ms is not None
            ]
    for name in PERCENTILE_METRICS:  # vLLM's order: ttft, tpot, itl, e2el, then the queue metrics
        if name not in opts.percentile_metrics or name not in series:
            continue
        a = np.asarray(series[name], dtype=float)
        doc[f"mean_{name}_ms"] = float(a.mean()) if a.size else None
        doc[f"median_{name}_ms"] = float(np.median(a)) if a.size else None
        doc[f"std_{name}_ms"] = float(a.std()) if a.size else None
        for p in opts.metric_percentiles:
            doc[f"{percentile_key(p)}_{name}_ms"] = float(np.percentile(a, p)) if a.size else None
    return doc


def summary(doc: Mapping[str, Any]) -> str:
    """vLLM's "Serving Benchmark Result" block, from a ``vllm_result`` document."""

    def line(label: str, v: Any, digits: int | None = 2) -> str:
        text = "n/a" if v is None else (f"{v:.{digits}f}" if digits is not None else str(v))
        return f"{label:<40} {text:<10}"

    out = [
        "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
        line("Successful requests:", doc["completed"], None),
        line("Failed requests:", doc["failed"], None),
    ]
    if doc.get("max_concurrency") is not None:
        out.append(line("Maximum request concurrency:", doc["max_concurrency"], None))
    if doc.get("request_rate") != "inf":
        out.append(line("Request rate configured (RPS):", doc["request_rate"]))
    out += [
        line("Benchmark duration (s):", doc["duration"]),
        line("Total input tokens:", doc["total_input_tokens"], None),
        line("Total generated tokens:", doc["total_output_tokens"], None),
        line("Request throughput (req/s):", doc["request_throughput"]),
    ]
    if doc.get("request_goodput") is not None:
        out.append(line("Request goodput (req/s):", doc["request_goodput"]))
    out += [
        line("Output token throughput (tok/s):", doc["output_throughput"]),
        line("Peak output token throughput (tok/s):", doc["max_output_tokens_per_s"]),
        line("Peak concurrent requests:", doc["max_concurrent_requests"]),
        line("Total token throughput (tok/s):", doc["total_token_throughput"]),
    ]
    for name in PERCENTILE_METRICS:
        if f"mean_{name}_ms" not in doc:
            continue
        label = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}.get(name, name)
        out.append("{s:{c}^{n}}".format(s=f" {label} ", n=50, c="-"))
        for k, v in doc.items():  # vLLM prints the mean, the median and the percentiles, not the std
            stat, _, rest = k.partition("_")
            if rest == f"{name}_ms" and stat != "std":
                out.append(line(f"{stat.capitalize() if stat[0] != 'p' else stat.upper()} {label} (ms):", v))
    out.append("=" * 50)
    return "\n".join(out)
