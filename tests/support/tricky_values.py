"""Request records with every tricky value the load path must keep: None vs NaN, empty lists, unicode,
time zones, int64 extremes; and the comparison that treats NaN as equal to NaN."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

from strix_pipeline.records import RequestRecord

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
CEST = timezone(timedelta(hours=2))
NAN = float("nan")


def tricky_request(i: int, **kw: object) -> RequestRecord:
    base: dict[str, object] = dict(
        run_id="tricky",
        scenario="concurrency_sweep",
        level=5,
        level_kind="concurrency",
        request_index=i,
        warmup=False,
        sent_at=T0 + timedelta(microseconds=i),
        sent_offset_ms=0.5 * i,
        queue_ms=0.0,
        ttfb_ms=1.0,
        ttft_ms=2.0,
        e2e_ms=3.0,
        input_tokens=10,
        input_tokens_estimated=False,
        output_tokens=4,
        output_tokens_estimated=True,
        cached_tokens=None,
        ok=True,
        error_class=None,
        error_message=None,
        event_offsets_ms=[2.0, 2.5],
        event_tokens=[1, 1],
        server_timings=None,
        prompt_id=None,
    )
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]


def tricky_requests() -> list[RequestRecord]:
    return [
        tricky_request(0),
        # None everywhere it is allowed, and empty lists (not NULL lists)
        tricky_request(
            1,
            ttfb_ms=None,
            ttft_ms=None,
            e2e_ms=None,
            input_tokens=None,
            output_tokens=None,
            ok=False,
            error_class="ReadTimeout",
            error_message="timed out",
            event_offsets_ms=[],
            event_tokens=[],
        ),
        # NaN is a value, not a NULL: in the scalars and inside the lists
        tricky_request(
            2, ttft_ms=NAN, queue_ms=-0.0, event_offsets_ms=[NAN, 1e308, -1e-308], event_tokens=[0, -1]
        ),
        # unicode and JSON text, verbatim
        tricky_request(
            3,
            scenario="prefill_ladder",
            error_message="Fehler: Zeitüberschreitung — 超时 🚫",
            server_timings='{"prompt_n": 12, "note": "ünïcödé"}',
            prompt_id="",
        ),
        # tz-aware but not UTC: stored as the same instant
        tricky_request(4, sent_at=datetime(2026, 3, 1, 14, 0, 0, 999999, tzinfo=CEST)),
        # extremes of int64 and an int where a float is declared
        tricky_request(5, level=2**63 - 1, request_index=-(2**63), sent_offset_ms=7, cached_tokens=0),
        # one long list, and the datetime at microsecond precision far from the epoch
        tricky_request(
            6,
            sent_at=datetime(2099, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            event_offsets_ms=[float(k) / 3 for k in range(1000)],
            event_tokens=list(range(1000)),
        ),
        tricky_request(7, sent_at=datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC), warmup=True),
    ]


def same_value(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b and type(a) is type(b) or (isinstance(a, float) and a == b)
