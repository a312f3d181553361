"""Aggregate definitions (docs/bench-output.md, "Metric definitions") on hand-made records with known
answers."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from support.prometheus import parse_prometheus, sample_value

from strix_pipeline.config import SLO
from strix_pipeline.loadgen.metrics import aggregate_level
from strix_pipeline.records import RequestRecord


def rec(
    i: int,
    ttft: float | None,
    events: list[float],
    out: int | None,
    *,
    ok: bool = True,
    tokens: list[int] | None = None,
    warmup: bool = False,
    sent: float = 0.0,
    inp: int = 100,
) -> RequestRecord:
    return RequestRecord(
        run_id="r",
        scenario="concurrency_sweep",
        level=2,
        level_kind="concurrency",
        request_index=i,
        warmup=warmup,
        sent_at=datetime.now(UTC),
        sent_offset_ms=sent,
        queue_ms=1.0,
        ttfb_ms=1.0,
        ttft_ms=ttft,
        e2e_ms=events[-1] if events else None,
        input_tokens=inp,
        input_tokens_estimated=False,
        output_tokens=out,
        output_tokens_estimated=False,
        cached_tokens=None,
        ok=ok,
        error_class=None if ok else "http_500",
        error_message=None,
        event_offsets_ms=events,
        event_tokens=tokens or [],
    )


def test_tpot_itl_and_failures() -> None:
    records = [
        rec(0, 100, [100, 110, 130], 3, tokens=[1, 1, 1]),  # TPOT (130-100)/2 = 15; gaps 10, 20
        rec(1, 200, [200, 260], 4, tokens=[1, 3]),  # TPOT 60/3 = 20; gap 60, per token 20
        rec(2, None, [], None, ok=False),  # failed: counted, contributes no latency
        rec(3, 1.0, [1.0, 2.0], 2, warmup=True),  # warm-up: excluded entirely
    ]
    a = aggregate_level(
        records,
        run_id="r",
        scenario="concurrency_sweep",
        level=2,
        level_kind="concurrency",
        slo=SLO(),
        duration_s=2.0,
    )
    assert (a.requests_ok, a.requests_failed) == (2, 1)
    assert a.ttft_mean_ms == 150 and a.ttft_p50_ms == 150
    assert a.tpot_mean_ms == pytest.approx(17.5)
    assert a.itl_mean_ms == pytest.approx(30.0)  # pooled gaps 10, 20, 60
    assert a.itl_per_token_mean_ms == pytest.approx((10 + 20 + 20) / 3)
    assert a.e2e_p50_ms == pytest.approx(195)
    assert a.output_tokens_total == 7 and a.output_tokens_per_s == pytest.approx(3.5)
    assert a.requests_per_s == pytest.approx(1.0)
    assert a.ttft_p95_ms == pytest.approx(np.percentile([100, 200], 95))


def test_goodput_counts_requests_meeting_every_slo() -> None:
    records = [
        rec(0, 100, [100, 110], 2),  # meets all
        rec(1, 3000, [3000, 3010], 2),  # TTFT too slow
        rec(2, 100, [100, 400], 2),  # TPOT 300 > 100
        rec(3, 100, [100], 1),  # one token: no TPOT, meets the rest
    ]
    a = aggregate_level(
        records,
        run_id="r",
        scenario="s",
        level=1,
        level_kind="concurrency",
        slo=SLO(ttft_ms=2000, tpot_ms=100, e2e_ms=60000),
        duration_s=4.0,
    )
    assert a.goodput_requests_per_s == pytest.approx(2 / 4.0)
    assert a.requests_per_s == pytest.approx(1.0)


def test_duration_defaults_to_first_send_to_last_completion() -> None:
    records = [rec(0, 10, [10, 20], 2, sent=0), rec(1, 10, [10, 30], 2, sent=1000)]
    a = aggregate_level(records, run_id="r", scenario="s", level=1, level_kind="concurrency", slo=SLO())
    assert a.duration_s == pytest.approx(1.030)


def test_prefill_and_decode_rates() -> None:
    lad = [rec(0, 500, [500, 510], 2, inp=1000), rec(1, 1500, [1500, 1510], 2, inp=2000)]
    a = aggregate_level(
        lad, run_id="r", scenario="prefill_ladder", level=1000, level_kind="input_tokens", slo=SLO()
    )
    assert a.prefill_tokens_per_s == pytest.approx(3000 / 2.0)
    dec = [rec(0, 10, [10, 110], 11), rec(1, 10, [10, 310], 21)]
    d = aggregate_level(dec, run_id="r", scenario="decode", level=1, level_kind="single", slo=SLO())
    assert d.decode_tokens_per_s == pytest.approx(30 / 0.4)


PROM = r"""# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 1234
vllm:kv_cache_usage_perc{engine="0",model_name="m \"q\" x"} 0.25
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 7 1700000000000
vllm:num_requests_waiting{model_name="a"} 2
vllm:num_requests_waiting{model_name="b"} 3
sglang:token_usage NaN
process_cpu_seconds_total 3.5
"""


def test_prometheus_parser_keeps_engine_samples() -> None:
    s = parse_prometheus(PROM)
    names = [n for n, _, _ in s]
    assert "process_cpu_seconds_total" not in names
    assert ("llamacpp:tokens_predicted_total", {}, 1234.0) in s
    kv = next(x for x in s if x[0] == "vllm:kv_cache_usage_perc")
    assert kv[1] == {"engine": "0", "model_name": 'm "q" x'} and kv[2] == 0.25
    assert next(x for x in s if x[0].endswith("_bucket"))[1]["le"] == "+Inf"
    assert sample_value(s, "vllm:num_requests_waiting") == 5
    assert sample_value(s, "sglang:token_usage") is None
