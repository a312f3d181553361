"""The streaming HTTP client: aiohttp, one shared session, raw chunks timestamped on arrival.

Why aiohttp and not httpx: httpx adds far more to the TTFT it measures (docs/benchmarks.md,
``benchmarks/client_overhead.py``). Bytes are stamped where they arrive: the response's payload reader
is switched to a subclass whose ``feed_data`` -- called by aiohttp's HTTP parser inside the socket's
``data_received`` callback -- records ``(perf_counter_ns(), bytes)`` and keeps nothing else. The
request's coroutine then sleeps until end of stream instead of waking once per chunk, and a chunk's time
does not wait for the other streams' coroutines to run first. When the tap cannot be fitted (another
aiohttp layout) the client falls back to a plain ``readany`` loop stamping on resume. SSE framing and
JSON decoding happen in ``parse_exchange``, after the level.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Any

import aiohttp

from strix_pipeline.loadgen.sse import decode_timed

READ_BUFSIZE = 1 << 20  # large reads: fewer wake-ups when many events arrive together
_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
_HEADERS_CLOSE = {**_HEADERS, "Connection": "close"}


async def _on_reused(session: object, ctx: SimpleNamespace, params: object) -> None:
    # Fired when the connector hands out a pooled keep-alive connection instead of opening one: the
    # only case in which a failure before any response byte may be a connection the server had closed.
    ex = ctx.trace_request_ctx
    if isinstance(ex, RawExchange):
        ex.reused = True


async def _on_body_written(session: object, ctx: SimpleNamespace, params: object) -> None:
    # Fired by aiohttp immediately before it writes the request body to the socket. On Python < 3.12
    # aiohttp writes the body from a separate task, one loop iteration after ``post()`` was called; with
    # many streams that iteration can take milliseconds, which belong to the client, not the server.
    ex = ctx.trace_request_ctx
    if isinstance(ex, RawExchange) and not ex.sent_ns:
        ex.sent_ns = perf_counter_ns()


def _wire_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_on_body_written)
    trace.on_connection_reuseconn.append(_on_reused)
    return trace


def make_session(*, pooled: bool = True) -> aiohttp.ClientSession:
    """One session per run. limit=0: the connector never queues a request behind a connection cap.
    ``pooled=False``: every request opens a connection of its own, closed after it (never reused)."""
    connector = aiohttp.TCPConnector(
        limit=0, limit_per_host=0, ttl_dns_cache=None, enable_cleanup_closed=True, force_close=not pooled
    )
    return aiohttp.ClientSession(
        connector=connector,
        read_bufsize=READ_BUFSIZE,
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None),
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        trace_configs=[_wire_trace()],
    )


class _TappedStreamReader(aiohttp.StreamReader):
    """aiohttp's payload reader, with ``feed_data`` diverted into the exchange's (times, chunks)."""

    __slots__ = ()  # same layout as the parent, so an instance's class can be switched in place

    def feed_data(self, data: bytes, size: int = 0) -> bool:
        tap = _TAPS.get(id(self))
        if tap is None:
            return super().feed_data(data, size)
        if data:
            tap[0].append(perf_counter_ns())
            tap[1].append(bytes(data))
        return False  # nothing buffered: no flow-control pause, no reader to wake


_TAPS: dict[int, tuple[list[int], list[bytes]]] = {}


def _tap(resp: aiohttp.ClientResponse, ex: RawExchange) -> bool:
    """Divert the response body into ``ex``; False if this aiohttp's reader cannot be tapped."""
    content = resp.content
    if type(content) is not aiohttp.StreamReader:
        return False
    early = content.read_nowait()  # body bytes that came in with the headers
    if early:
        ex.chunk_ns.append(perf_counter_ns())
        ex.chunks.append(early)
    try:
        content.__class__ = _TappedStreamReader
    except TypeError:
        return False
    _TAPS[id(content)] = (ex.chunk_ns, ex.chunks)
    return True


@dataclass(slots=True)
class RawExchange:
    """What one request produced on the wire, before any parsing."""

    call_ns: int = 0  # post() called
    sent_ns: int = 0  # request body handed to the socket: the origin of TTFT, E2E and ITL offsets
    status: int | None = None
    headers_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    end_ns: int | None = None
    error_class: str | None = None
    error_message: str | None = None
    error_body: bytes | None = None
    tapped: bool = False  # chunks stamped in the protocol callback (else on coroutine resume)
    reused: bool = False  # sent on a pooled keep-alive connection (else on one opened for it)
    stale: bool = False  # failed on a pooled connection the server had closed: see RETRY_POLICY
    retried: bool = False  # this is the second attempt, after a stale connection


# The one statement of what the client sends again (docs/faults.md, tests/reliability/test_engine_faults.py).
RETRY_POLICY = """\
A request is sent again at most once, and only when it cannot have been served: it failed on a
keep-alive connection taken from the pool (reused), the connection closed or reset
(ServerDisconnectedError, ClientOSError, ClientConnectionResetError) before any byte of a response
arrived. The second attempt goes on a connection opened for it alone (a connector that never pools),
and so does every later request of the run: the server closes keep-alive connections. Never sent
again: a failure on a connection opened for the request (refused or reset: the server is down or
refuses), a timeout, any HTTP status (500 included), a stream cut after the response began, a
malformed event. Each of those is one failed request record with its class (connection, timeout,
http_<status>, stream_cut, protocol, server_error)."""

_STALE_ERRORS = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)


def is_stale(error: BaseException, *, reused: bool, status: int | None, got_bytes: bool) -> bool:
    """RETRY_POLICY's test: the request failed on a pooled connection the server had already closed."""
    return (
        reused
        and status is None
        and not got_bytes
        and isinstance(error, _STALE_ERRORS)
        and not isinstance(error, aiohttp.ClientConnectorError)  # connecting failed: nothing was pooled
    )


@dataclass
class ConnectionPolicy:
    """Shared by the requests of one run; applies RETRY_POLICY.

    Some servers (llama-server: cpp-httplib) close a keep-alive connection right after a streamed
    response (measured: at once, although the headers say ``Keep-Alive: timeout=5``), and other
    responses after 5 s idle; aiohttp may have pooled such a connection and hand it to the next
    request, which then fails without reaching the server. ``Connection: close`` alone does not help:
    the connector would still hand out another pooled -- equally dead -- connection. So the retry and
    every later request go through ``fresh``, a session whose connector never pools; the connect
    happens before the request is written, so it never lands in TTFT."""

    close_each: bool = False
    stale_retries: int = 0
    fresh: aiohttp.ClientSession | None = None

    def fresh_session(self) -> aiohttp.ClientSession:
        if self.fresh is None or self.fresh.closed:
            self.fresh = make_session(pooled=False)
        return self.fresh

    async def aclose(self) -> None:
        if self.fresh is not None:
            await self.fresh.close()
            self.fresh = None


async def stream_post(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    timeout_s: float,
    policy: ConnectionPolicy | None = None,
) -> RawExchange:
    """POST ``body`` and collect the streamed response; never raises for network or HTTP trouble.
    Sent again only as RETRY_POLICY says."""
    own = policy is None
    policy = ConnectionPolicy() if policy is None else policy
    try:
        ex = await _attempt(
            policy.fresh_session() if policy.close_each else session, url, body, timeout_s, policy.close_each
        )
        if ex.stale:
            policy.close_each = True
            policy.stale_retries += 1
            first = ex
            ex = await _attempt(policy.fresh_session(), url, body, timeout_s, True)
            ex.retried = True
            if ex.error_class is not None:  # both attempts are the diagnosis
                ex.error_message = f"{ex.error_message} (retried once after {first.error_message})"[:500]
        return ex
    finally:
        if own:
            await policy.aclose()


async def _attempt(
    session: aiohttp.ClientSession, url: str, body: bytes, timeout_s: float, close: bool
) -> RawExchange:
    ex = RawExchange()
    times = ex.chunk_ns
    chunks = ex.chunks
    # One deadline for the whole request, a stall included. (A sock_read timeout would re-arm a timer on
    # every chunk: measurable CPU per token for nothing, since it could not be shorter than the total.)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    ex.call_ns = perf_counter_ns()
    try:
        async with session.post(
            url,
            data=body,
            headers=_HEADERS_CLOSE if close else _HEADERS,
            timeout=timeout,
            trace_request_ctx=ex,
        ) as resp:
            ex.headers_ns = perf_counter_ns()
            ex.status = resp.status
            if resp.status != 200:
                ex.error_body = (await resp.read())[:4000]
                ex.error_class = f"http_{resp.status}"
                ex.error_message = ex.error_body.decode("utf-8", "replace")[:500]
            elif _tap(resp, ex):
                ex.tapped = True
                try:
                    # Returns b"" at end of stream; raises on a cut stream, a stall or a timeout.
                    while await resp.content.readany():
                        pass
                finally:
                    _TAPS.pop(id(resp.content), None)
            else:
                read = resp.content.readany
                while True:
                    data = await read()
                    if not data:
                        break
                    times.append(perf_counter_ns())
                    chunks.append(data)
    except (TimeoutError, aiohttp.ServerTimeoutError) as e:
        ex.error_class = "timeout"
        ex.error_message = f"no complete response within {timeout_s:g}s ({type(e).__name__})"
    except aiohttp.ClientPayloadError as e:
        ex.error_class = "stream_cut"
        ex.error_message = str(e)[:500]
    except aiohttp.ClientConnectionError as e:
        ex.error_class = "connection"
        ex.error_message = f"{type(e).__name__}: {e}"[:500]
        ex.stale = is_stale(e, reused=ex.reused, status=ex.status, got_bytes=bool(ex.chunks))
    except aiohttp.ClientError as e:
        ex.error_class = "client_error"
        ex.error_message = f"{type(e).__name__}: {e}"[:500]
    ex.end_ns = perf_counter_ns()
    if not ex.sent_ns:  # never reached the socket (connection refused, ...)
        ex.sent_ns = ex.call_ns
    return ex


@dataclass
class ParsedStream:
    """One exchange decoded: content event times, usage, llama-server timings, errors."""

    ttfb_ns: int | None = None
    content_ns: list[int] = field(default_factory=list)  # arrival of each event that carried content
    content_tokens: list[int] = field(default_factory=list)  # tokens per content event when the server said
    text: str = ""
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    done: bool = False  # saw data: [DONE]
    n_events: int = 0
    error_class: str | None = None
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_class is None


def _delta_text(choice: dict[str, Any]) -> str:
    """Text a choice carries: content, reasoning, tool-call name/arguments, or legacy completions text."""
    delta = choice.get("delta")
    if delta is None:
        return choice.get("text") or ""
    parts = []
    for key in ("content", "reasoning_content", "reasoning"):
        v = delta.get(key)
        if v:
            parts.append(v)
    for call in delta.get("tool_calls") or ():
        fn = call.get("function") or {}
        for key in ("name", "arguments"):
            v = fn.get(key)
            if v:
                parts.append(v)
    return "".join(parts)


def parse_exchange(ex: RawExchange) -> ParsedStream:
    """Decode an exchange. Pure, run after the level: the hot path only stored bytes and times."""
    p = ParsedStream(ttfb_ns=ex.headers_ns, error_class=ex.error_class, error_message=ex.error_message)
    if ex.status != 200:
        return p
    texts: list[str] = []
    last_completion: int | None = None
    continuous = True  # usage on every content event lets us count tokens per event
    for t, data in decode_timed(zip(ex.chunk_ns, ex.chunks, strict=True)):
        p.n_events += 1
        if data.strip() == b"[DONE]":
            p.done = True
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            if p.error_class is None:
                p.error_class, p.error_message = "protocol", f"event is not JSON: {data[:200]!r}"
            continue
        if not isinstance(obj, dict):
            continue
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else str(err)
            if p.error_class is None:
                p.error_class, p.error_message = "server_error", str(msg)[:500]
            continue
        usage = obj.get("usage")
        if isinstance(obj.get("timings"), dict):
            p.timings = obj["timings"]
        text = "".join(_delta_text(c) for c in obj.get("choices") or ())
        if text:
            p.content_ns.append(t)
            texts.append(text)
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                n = usage["completion_tokens"]
                p.content_tokens.append(n - (last_completion or 0))
                last_completion = n
            else:
                continuous = False
        if isinstance(usage, dict):
            p.usage = usage
    p.text = "".join(texts)
    if not continuous or len(p.content_tokens) != len(p.content_ns):
        p.content_tokens = []
    if p.error_class is None:
        if p.n_events == 0 and ex.chunks:
            head = b"".join(ex.chunks)[:200]
            p.error_class, p.error_message = "protocol", f"response is not an event stream: {head!r}"
        elif not p.done:
            p.error_class, p.error_message = "stream_cut", "stream ended without data: [DONE]"
        elif not p.content_ns:
            p.error_class, p.error_message = "no_content", "stream carried no content event"
    return p
