"""The client against a synthetic streaming server: every edge case is recorded right, none crashes a run."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Sequence

import pytest
from support.synthetic_server import SyntheticServer

from strix_pipeline.config import SLO
from strix_pipeline.loadgen import DatasetLoad, SuiteResult, client, run_load
from strix_pipeline.loadgen.context import EXIT_WAIT_S
from strix_pipeline.loadgen.workloads import Prompt
from strix_pipeline.records import RequestRecord


@pytest.fixture(autouse=True, params=["tapped", "readany"])
def read_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every case runs on both read paths: the protocol-level tap and the plain readany fallback."""
    if request.param == "readany":
        monkeypatch.setattr(client, "_tap", lambda resp, ex: False)
    return request.param


TTFT_MS = 30.0
ITL_MS = 4.0
N = 12


def run(
    mode: str, n: int = N, *, count: int = 1, concurrency: int = 1, timeout_s: float = 10.0, **srv: float
) -> tuple[SuiteResult, SyntheticServer]:
    async def go() -> tuple[SuiteResult, SyntheticServer]:
        async with SyntheticServer(
            ttft_ms=srv.get("ttft_ms", TTFT_MS), itl_ms=srv.get("itl_ms", ITL_MS)
        ) as server:
            prompts = [Prompt(f"p{i}", f"prompt {i}", None, None, n) for i in range(count)]
            res = await run_load(
                server.base_url,
                f"synthetic/{mode}",
                SLO(),
                "t",
                DatasetLoad(prompts, levels=[concurrency]),
                timeout_s=timeout_s,
            )
            return res, server

    return asyncio.run(go())


def only(res: SuiteResult) -> RequestRecord:
    assert len(res.requests) == 1
    return res.requests[0]


def test_normal_role_only_first_event_does_not_count() -> None:
    res, srv = run("normal")
    r = only(res)
    assert r.ok and r.error_class is None
    # The role-only event arrives with the headers, well before the first token.
    assert r.ttfb_ms is not None and r.ttfb_ms < TTFT_MS / 2
    assert r.ttft_ms is not None and r.ttft_ms >= TTFT_MS
    assert r.output_tokens == N and not r.output_tokens_estimated
    assert r.input_tokens == len("prompt 0") and not r.input_tokens_estimated
    assert len(r.event_offsets_ms) == N and r.event_tokens == [1] * N
    assert r.e2e_ms == r.event_offsets_ms[-1] and r.ttft_ms == r.event_offsets_ms[0]
    assert r.e2e_ms >= TTFT_MS + (N - 1) * ITL_MS
    assert json.loads(r.server_timings or "{}")["predicted_n"] == N
    agg = res.aggregates[0]
    assert agg.requests_ok == 1 and agg.requests_failed == 0 and agg.output_tokens_total == N
    assert agg.tpot_p50_ms == pytest.approx((r.e2e_ms - r.ttft_ms) / (N - 1))


def test_events_split_across_reads_with_crlf() -> None:
    res, srv = run("split", itl_ms=0)
    r = only(res)
    assert r.ok and r.output_tokens == N and len(r.event_offsets_ms) == N
    assert len(srv.log[0].event_ns) == N
    # An event's time is when its last piece arrived: the first token's event ends two pauses later.
    assert r.ttft_ms is not None and r.ttft_ms >= TTFT_MS + 2 * 3.0 * 0.9
    gaps = [b - a for a, b in zip(r.event_offsets_ms, r.event_offsets_ms[1:], strict=False)]
    assert min(gaps) >= 3 * 3.0 * 0.9  # three pieces, 3 ms apart


def test_several_events_in_one_read() -> None:
    r = only(run("batch")[0])
    assert r.ok and r.output_tokens == N and len(r.event_offsets_ms) == N
    assert r.event_offsets_ms[0] == r.event_offsets_ms[-1]  # one read, one timestamp


def test_multi_token_events_with_continuous_usage() -> None:
    res, _ = run("multi", 10)
    r = only(res)
    assert r.ok and r.output_tokens == 10 and r.event_tokens == [3, 3, 3, 1]
    agg = res.aggregates[0]
    gaps = [b - a for a, b in zip(r.event_offsets_ms, r.event_offsets_ms[1:], strict=False)]
    per_token = [gaps[0] / 3, gaps[1] / 3, gaps[2] / 1]
    assert agg.itl_mean_ms == pytest.approx(sum(gaps) / 3)
    assert agg.itl_per_token_mean_ms == pytest.approx(sum(per_token) / 3)


def test_multi_token_events_without_per_event_usage() -> None:
    res, _ = run("multi_nousage", 9)
    r = only(res)
    assert r.ok and r.output_tokens == 9 and len(r.event_offsets_ms) == 3 and r.event_tokens == []
    agg = res.aggregates[0]
    assert agg.itl_per_token_mean_ms == pytest.approx(agg.itl_mean_ms / 3)


def test_keepalive_comments_and_empty_events_ignored() -> None:
    r = only(run("keepalive")[0])
    assert r.ok and len(r.event_offsets_ms) == N and r.output_tokens == N


def test_http_500_is_a_failed_request_not_dropped() -> None:
    res, _ = run("http500", count=3)
    assert len(res.requests) == 3
    assert all(
        not r.ok and r.error_class == "http_500" and "synthetic failure" in (r.error_message or "")
        for r in res.requests
    )
    agg = res.aggregates[0]
    assert (
        agg.requests_ok == 0
        and agg.requests_failed == 3
        and agg.ttft_p50_ms is None
        and agg.output_tokens_per_s == 0.0  # served nothing, truthfully
        and agg.goodput_requests_per_s == 0.0
    )


def test_stream_cut_midway() -> None:
    r = only(run("cut")[0])
    assert not r.ok and r.error_class == "stream_cut"
    assert 0 < len(r.event_offsets_ms) < N  # what arrived is kept for diagnosis


def test_a_cut_stream_from_a_live_engine_leaves_the_next_request_unqueued() -> None:
    """After a stream_cut the harness asks for up to EXIT_WAIT_S whether the engine died; an engine that
    still runs costs that wait, but it is the harness's, not queueing the next request had to do."""

    async def go() -> SuiteResult:
        async with SyntheticServer(ttft_ms=TTFT_MS, itl_ms=ITL_MS) as server:
            prompts = [Prompt(f"p{i}", f"prompt {i}", None, None, N) for i in range(2)]
            return await run_load(
                server.base_url,
                "synthetic/cut",
                SLO(),
                "t",
                DatasetLoad(prompts, levels=[1]),
                timeout_s=10.0,
                engine_exit=lambda: None,  # alive: each liveness check waits its whole EXIT_WAIT_S
            )

    t0 = time.monotonic()
    res = asyncio.run(go())
    assert time.monotonic() - t0 >= 2 * EXIT_WAIT_S  # both cut streams were checked
    first, second = sorted(res.requests, key=lambda r: r.request_index)
    assert (first.error_class, second.error_class) == ("stream_cut", "stream_cut")
    assert second.queue_ms < 200, second.queue_ms  # one client, free as soon as the check was over


def test_stall_past_the_timeout() -> None:
    t0 = time.monotonic()
    r = only(run("stall", timeout_s=0.5)[0])
    assert time.monotonic() - t0 < 5
    assert not r.ok and r.error_class == "timeout" and len(r.event_offsets_ms) == 2


def test_missing_final_blank_line() -> None:
    r = only(run("nofinal")[0])
    assert r.ok and r.output_tokens == N


def test_line_over_128_kib() -> None:
    r = only(run("longline", 3)[0])
    assert r.ok and r.output_tokens == 3 and len(r.event_offsets_ms) == 3


def test_error_event_mid_stream() -> None:
    r = only(run("error_event")[0])
    assert not r.ok and r.error_class == "server_error" and "mid-stream" in (r.error_message or "")


def test_no_usage_means_estimated_counts() -> None:
    r = only(run("nousage")[0])
    assert r.ok and r.output_tokens == N and r.output_tokens_estimated and r.input_tokens_estimated


def test_all_edge_cases_together_under_concurrency() -> None:
    async def go() -> list[RequestRecord]:
        async with SyntheticServer(ttft_ms=5, itl_ms=1) as server:
            modes: Sequence[str] = (
                "normal",
                "split",
                "http500",
                "cut",
                "stall",
                "multi",
                "keepalive",
                "error_event",
            )
            tasks = [
                run_load(
                    server.base_url,
                    f"synthetic/{m}",
                    SLO(),
                    "t",
                    DatasetLoad([Prompt(m, "x", None, None, 8)], levels=[1], requests=2),
                    timeout_s=1.0,
                )
                for m in modes
            ]
            results = await asyncio.gather(*tasks)
            return [r for res in results for r in res.requests]

    records = asyncio.run(go())
    by = {}
    for r in records:
        by.setdefault(r.prompt_id, []).append(r)
    assert {k: [x.ok for x in v] for k, v in by.items()} == {
        "normal": [True, True],
        "split": [True, True],
        "http500": [False, False],
        "cut": [False, False],
        "stall": [False, False],
        "multi": [True, True],
        "keepalive": [True, True],
        "error_event": [False, False],
    }


def test_connection_refused_is_recorded() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nothing listens there
    res = asyncio.run(
        run_load(
            f"http://127.0.0.1:{port}/v1",
            "m",
            SLO(),
            "t",
            DatasetLoad([Prompt("p", "x", None, None, 4)], requests=2),
            timeout_s=2,
        )
    )
    assert [r.error_class for r in res.requests] == ["connection", "connection"]
    assert res.aggregates[0].requests_failed == 2


def test_the_tap_is_used_and_sees_every_byte(read_path: str) -> None:
    async def go() -> tuple[client.RawExchange, bytes]:
        async with SyntheticServer(ttft_ms=2, itl_ms=1) as srv, client.make_session() as session:
            body = json.dumps(
                {"model": "synthetic/split", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
            )
            ex = await client.stream_post(session, srv.base_url + "/v1/chat/completions", body.encode(), 5)
            async with session.post(srv.base_url + "/v1/chat/completions", data=body) as r:
                whole = await r.read()
            return ex, whole

    ex, whole = asyncio.run(go())
    assert ex.tapped == (read_path == "tapped")
    # Same bytes as aiohttp's own reader, nothing lost or doubled (digits differ: server timestamps).
    assert re.sub(rb"\d", b"", b"".join(ex.chunks)) == re.sub(rb"\d", b"", whole)
    assert len(b"".join(ex.chunks)) > 1000
    assert ex.chunk_ns == sorted(ex.chunk_ns) and ex.sent_ns >= ex.call_ns


def test_server_closing_pooled_connections_after_a_stream() -> None:
    res, srv = run("close_after", 4, count=5)
    assert [r.ok for r in res.requests] == [True] * 5, [r.error_message for r in res.requests]
    assert len(srv.log) == 5  # each request reached the server exactly once
    assert any("closes keep-alive connections" in e for e in res.errors)


def test_a_plain_json_answer_is_a_protocol_error() -> None:
    ex = client.RawExchange(
        status=200, chunk_ns=[1], chunks=[b'{"choices": [{"message": {"content": "hi"}}]}']
    )
    p = client.parse_exchange(ex)
    assert p.error_class == "protocol" and "not an event stream" in (p.error_message or "")
