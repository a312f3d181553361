"""``vllm bench serve --save-result`` JSON: one file, one level.

The keys are vLLM's (``vllm/benchmarks/serve.py``: ``benchmark`` and ``main_async``), the inverse of
:mod:`strix_pipeline.loadgen.vllm_result`: ``median_ttft_ms`` is TTFT p50, ``output_throughput``
output tok/s, ``pNN_<metric>_ms`` the percentiles of ``--metric-percentiles``. The file does not
record vLLM's version (give ``--tool-version``) nor its dataset (the level's scenario is ``random``,
as strix names its vLLM-shaped random run; ``--scenario`` names another). A closed loop (no
``--request-rate``) is level ``max_concurrency`` (all ``num_prompts`` at once without one), an open
loop level ``rate x 60`` of kind ``rate``, as strix levels its own.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from strix_pipeline.peers.common import (
    Field,
    ImportOptions,
    checked_time,
    level_for,
    peer_result,
    read_json,
)
from strix_pipeline.records import LevelAggregate, RunResult

TOOL = "vllm-bench"
SCENARIO = "random"
# vLLM's metric names -> strix's aggregate column prefixes
_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
_PCT = re.compile(r"^p(\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
_REQUIRED = (
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_output_tokens",
)


def detect(doc: Any) -> bool:
    return isinstance(doc, dict) and all(
        k in doc for k in ("completed", "output_throughput", "request_throughput")
    )


def load(path: Path, opts: ImportOptions) -> RunResult:
    doc = read_json(path)
    f = Field(path)
    if not isinstance(doc, dict):
        raise f.fail("$", "expected vLLM's result object")
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        raise f.fail(f"$.{missing[0]}", "missing (not a `vllm bench serve --save-result` file?)")
    if opts.tool_version is None:
        raise f.fail(
            "$", "vLLM's result JSON does not record vLLM's version: give --tool-version (e.g. 0.32.0)"
        )
    ok = f.count(doc, "completed")
    failed = f.count(doc, "failed")
    duration = f.req_num(doc, "duration")
    n_prompts = f.count(doc, "num_prompts")
    model = f.req_text(doc, "model_id")
    date = f.req_text(doc, "date")
    try:
        # vLLM writes the local time of the run ("%Y%m%d-%H%M%S", no zone): read in this machine's zone
        started = datetime.strptime(date, "%Y%m%d-%H%M%S").astimezone()
    except ValueError:
        raise f.fail("$.date", f"expected vLLM's %Y%m%d-%H%M%S, got {date!r}") from None
    rate_raw = f.get(doc, "request_rate")
    if rate_raw == "inf":
        rate: float | None = None
    else:
        rate = f.num(doc, "request_rate")
        if rate is not None and (rate <= 0 or math.isinf(rate)):
            raise f.fail("$.request_rate", f"expected a positive rate or 'inf', got {rate_raw!r}")
    conc_raw = f.get(doc, "max_concurrency")
    conc = None if conc_raw is None else f.count(doc, "max_concurrency")
    if rate is None and conc is None:
        conc = n_prompts  # vLLM sends every prompt at once
    level, kind = level_for(max_concurrency=conc, rate=rate)

    agg = LevelAggregate(
        run_id="",
        scenario=opts.scenario or SCENARIO,
        level=level,
        level_kind=kind,
        requests_ok=ok,
        requests_failed=failed,
        duration_s=duration,
        requests_planned=n_prompts,
        output_tokens_total=f.count(doc, "total_output_tokens"),
        output_tokens_per_s=f.req_num(doc, "output_throughput"),
        requests_per_s=f.req_num(doc, "request_throughput"),
        goodput_requests_per_s=f.opt_num(doc, "request_goodput"),
        requested_rate=rate,
    )
    n_in = f.count(doc, "total_input_tokens") if "total_input_tokens" in doc else None
    agg.input_tokens_mean = n_in / ok if n_in is not None and ok else None
    for name, col in _METRICS.items():
        _set(agg, f"{col}_mean_ms", f.opt_num(doc, f"mean_{name}_ms"))
        _set(agg, f"{col}_p50_ms", f.opt_num(doc, f"median_{name}_ms"))
    for key in doc:
        m = _PCT.match(key)
        if m and m.group(1) in ("50", "90", "95", "99"):
            _set(agg, f"{_METRICS[m.group(2)]}_p{m.group(1)}_ms", f.num(doc, key, null=True))
    if "mean_client_queue_time_ms" in doc:
        agg.queue_mean_ms = f.opt_num(doc, "mean_client_queue_time_ms")
        agg.queue_p95_ms = f.opt_num(doc, "p95_client_queue_time_ms")
    backend = doc.get("backend") if isinstance(doc.get("backend"), str) else None
    return peer_result(
        path,
        tool=TOOL,
        version=opts.tool_version,
        opts=opts,
        model=model,
        started_at=started,
        ended_at=checked_time(f, "$.duration", lambda: started + timedelta(seconds=duration)),
        aggregates=[agg],
        command=f"vllm bench serve --backend {backend}" if backend else None,
    )


def _set(agg: LevelAggregate, name: str, value: float | None) -> None:
    if value is not None:  # a statistic the file leaves out stays NULL
        setattr(agg, name, value)
