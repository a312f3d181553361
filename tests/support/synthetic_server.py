"""A small OpenAI-compatible streaming server on loopback, for edge cases and the client benchmark.

Plain asyncio (no web framework) so that it controls exactly how bytes hit the socket -- an event split
across TCP writes, several events in one write, CRLF, comments -- and stays cheap enough not to steal
the client's CPU in the overhead benchmark. The request's ``model`` picks a behaviour (see MODES).
Server-side times (``perf_counter_ns``: CLOCK_MONOTONIC, comparable across processes on Linux) are
kept per request and sent in the final usage event as ``x_server``.

Run alone: ``python tests/support/synthetic_server.py --port 0 --ttft-ms 20 --itl-ms 10`` prints ``PORT <n>``.
As a fake engine behind the local launcher: ``--serve-forever --mode cycle:normal,http500`` takes
llama-server's own arguments (``--host``, ``--port``; the others are ignored), answers ``/health``, and
gives each completion request the next behaviour of the cycle whatever model it names.

Keep-alive faults (``keepalive_ms``): a connection idle longer than that is one the server has closed;
a request arriving on it is read and dropped unanswered (``stale="fin"``: the server closes,
``"rst"``: it resets), which is what a client sees when its request crosses the server's close of an
idle keep-alive connection -- made deterministic instead of a race (cpp-httplib, llama-server's HTTP
layer, closes after every streamed response and after 5 s idle).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

MODES = (
    "normal",  # role-only first event, 1 token per event, usage + llama-style timings, [DONE]
    "split",  # every event written in three pieces with pauses: split across reads, CRLF endings
    "batch",  # all events of a request in one write after the TTFT
    "multi",  # 3 tokens per event, continuous usage on each event (tokens per event known)
    "multi_nousage",  # 3 tokens per event, usage only at the end
    "keepalive",  # ": keep-alive" comments and empty-content events between content events
    "http500",  # HTTP 500 with a JSON error body
    "cut",  # half the events, then the connection is dropped without the terminating chunk
    "stall",  # two events, then silence
    "nofinal",  # last event "data: [DONE]" has no blank line after it
    "longline",  # one content event of 200 KB on a single line
    "error_event",  # a data: {"error": ...} event mid-stream
    "nousage",  # no usage event at all
    "close_after",  # keep-alive response, but the connection is closed once the stream ends (cpp-httplib)
    "hang",  # the request is read, then nothing: no status line, no byte, the connection stays open
    "drop",  # the request is read, then the connection is closed without an answer
    "garbage",  # 200 text/event-stream whose events are not JSON (then [DONE])
)


@dataclass
class ServerLog:
    mode: str
    recv_ns: int
    event_ns: list[int] = field(default_factory=list)  # content events written
    tokens: int = 0


class _TimedProtocol(asyncio.StreamReaderProtocol):
    """Stamps the arrival of the first bytes of each request, in the transport callback."""

    first_rx_ns = 0

    def data_received(self, data: bytes) -> None:
        if not self.first_rx_ns:
            self.first_rx_ns = perf_counter_ns()
        super().data_received(data)


class SyntheticServer:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        ttft_ms: float = 20.0,
        itl_ms: float = 5.0,
        n_ctx: int = 8192,
        *,
        keepalive_ms: float | None = None,
        stale: str = "fin",
        cycle: tuple[str, ...] = (),
    ):
        self.host, self.port = host, port
        self.ttft_ms, self.itl_ms, self.n_ctx = ttft_ms, itl_ms, n_ctx
        self.keepalive_ms, self.stale, self.cycle = keepalive_ms, stale, cycle
        self.arrivals: list[str] = []  # the mode of every completion request read, served or not
        self.dropped_stale = 0  # requests that arrived on a connection the server counted as closed
        self.log: list[ServerLog] = []
        self.tokens_predicted_total = 0
        self.prompt_tokens_total = 0
        self.processing = 0
        self._server: asyncio.base_events.Server | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> SyntheticServer:
        loop = asyncio.get_running_loop()

        def factory() -> _TimedProtocol:
            return _TimedProtocol(asyncio.StreamReader(limit=1 << 22, loop=loop), self._conn, loop=loop)

        self._server = await loop.create_server(factory, self.host, self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server:
            self._server.close()
            if hasattr(self._server, "close_clients"):
                self._server.close_clients()
            await self._server.wait_closed()

    async def __aenter__(self) -> SyntheticServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- HTTP/1.1 ------------------------------------------------------------------------------------

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        proto = writer.transport.get_protocol()
        idle_since: int | None = None  # end of the last response on this connection
        try:
            while True:
                if isinstance(proto, _TimedProtocol):
                    proto.first_rx_ns = 0
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)
                }
                n = int(headers.get("content-length", "0"))
                body = await reader.readexactly(n) if n else b""
                if (
                    self.keepalive_ms is not None
                    and idle_since is not None
                    and perf_counter_ns() - idle_since > self.keepalive_ms * 1e6
                ):
                    # this connection was closed on our side before the request came: never served (read
                    # first, so that closing sends a FIN, not the RST unread data would)
                    self.dropped_stale += 1
                    if self.stale == "rst":
                        writer.transport.abort()
                    return
                # The request's arrival is when its first bytes reached us, not when this coroutine
                # got around to it: the server's own scheduling delay must not count as the client's.
                recv = getattr(proto, "first_rx_ns", 0) or perf_counter_ns()
                keep = await self._route(method, path.split("?")[0], body, writer, recv)
                if not keep:
                    break
                idle_since = perf_counter_ns()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _send(
        writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json"
    ) -> None:
        reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}.get(status, "X")
        writer.write(
            (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )

    async def _route(self, method: str, path: str, body: bytes, w: asyncio.StreamWriter, recv: int) -> bool:
        if path in ("/v1/chat/completions", "/v1/completions") and method == "POST":
            return await self._stream(json.loads(body), path.endswith("chat/completions"), w, recv)
        if path == "/tokenize":
            text = json.loads(body).get("content", "")
            self._send(w, 200, json.dumps({"tokens": [ord(c) for c in text]}).encode())
        elif path == "/detokenize":
            toks = json.loads(body).get("tokens", [])
            self._send(w, 200, json.dumps({"content": "".join(chr(t) for t in toks)}).encode())
        elif path == "/health":
            self._send(w, 200, b'{"status": "ok"}')
        elif path == "/props":
            props = {"default_generation_settings": {"n_ctx": self.n_ctx}, "build_info": "synthetic"}
            self._send(w, 200, json.dumps(props).encode())
        elif path == "/v1/models":
            self._send(w, 200, json.dumps({"object": "list", "data": [{"id": "synthetic"}]}).encode())
        elif path == "/metrics":
            text = (
                "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n"
                "# TYPE llamacpp:tokens_predicted_total counter\n"
                f"llamacpp:tokens_predicted_total {self.tokens_predicted_total}\n"
                f"llamacpp:prompt_tokens_total {self.prompt_tokens_total}\n"
                f"llamacpp:requests_processing {self.processing}\n"
                'other_metric{a="b"} 1\n'
            )
            self._send(w, 200, text.encode(), "text/plain; version=0.0.4")
        else:
            self._send(w, 404, b'{"error": "not found"}')
        await w.drain()
        return True

    # --- streaming -----------------------------------------------------------------------------------

    async def _stream(self, req: dict[str, Any], chat: bool, w: asyncio.StreamWriter, recv: int) -> bool:
        model = str(req.get("model", "normal"))
        mode = model.split("/")[-1] if model.split("/")[-1] in MODES else "normal"
        if self.cycle:
            mode = self.cycle[len(self.arrivals) % len(self.cycle)]
        self.arrivals.append(mode)
        n = int(req.get("max_tokens") or 16)
        ttft = float(req.get("x_ttft_ms", self.ttft_ms)) / 1000
        itl = float(req.get("x_itl_ms", self.itl_ms)) / 1000
        if chat:
            prompt = "".join(m.get("content", "") for m in req.get("messages", []))
        else:
            prompt = str(req.get("prompt", ""))
        if mode == "http500":
            self._send(w, 500, b'{"error": {"message": "synthetic failure", "code": 500}}')
            await w.drain()
            return True
        if mode == "drop":
            return False
        if mode == "hang":
            await asyncio.sleep(3600)
            return False
        json_mode = (req.get("response_format") or {}).get("type") in ("json_object", "json_schema")
        log = ServerLog(mode, recv)
        self.log.append(log)
        self.processing += 1
        self.prompt_tokens_total += len(prompt)
        eol = b"\r\n" if mode == "split" else b"\n"
        per_event = 3 if mode in ("multi", "multi_nousage") else 1
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(payload: bytes) -> bytes:
            return b"%x\r\n%s\r\n" % (len(payload), payload)

        def event(d: dict[str, Any] | str) -> bytes:
            data = d if isinstance(d, str) else json.dumps(d, separators=(",", ":"))
            return b"data: " + data.encode() + eol + eol

        def content(text: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "finish_reason": None}
            if chat:
                choice["delta"] = {"content": text}
            else:
                choice["text"] = text
            d: dict[str, Any] = {"id": "x", "object": obj, "model": model, "choices": [choice]}
            if usage is not None:
                d["usage"] = usage
            return d

        fast_head, _, fast_tail = event(content("\x00")).partition(b"\\u0000")
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        if chat:
            role = {
                "id": "x",
                "object": obj,
                "model": model,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
            }
            w.write(chunk(event(role)))
        await w.drain()
        await asyncio.sleep(ttft)
        sent = 0
        events: list[bytes] = []
        try:
            while sent < n:
                k = min(per_event, n - sent)
                text = "".join(f" t{sent + j}" for j in range(k))
                if json_mode:  # a valid object once the tokens are joined: '{"t": "t0 t1 ...", "n": n}'
                    text = '{"t": "' if sent == 0 else f"t{sent} "
                    if sent + k >= n:
                        text += f'", "n": {n}}}'
                if mode == "longline" and sent == 0:
                    text = "x" * 200_000
                if mode == "garbage":
                    sent += k
                    w.write(chunk(b"data: {not json" + eol + eol))
                    await w.drain()
                    continue
                usage = (
                    {
                        "prompt_tokens": len(prompt),
                        "completion_tokens": sent + k,
                        "total_tokens": len(prompt) + sent + k,
                    }
                    if mode == "multi"
                    else None
                )
                if mode == "normal" and chat and not json_mode:
                    ev = (
                        fast_head + text.encode() + fast_tail
                    )  # no json.dumps per token: keep the server cheap
                else:
                    ev = event(content(text, usage))
                sent += k
                if mode == "batch":
                    events.append(ev)
                    log.event_ns.append(perf_counter_ns())
                    continue
                if mode == "keepalive":
                    w.write(chunk(b": keep-alive" + eol + eol))
                    w.write(chunk(event(content(""))))
                if mode == "split":
                    # Thirds, the last cut between the CR and LF of the event's first line ending.
                    a, b = len(ev) // 3, len(ev) - 3
                    for piece in (ev[:a], ev[a:b], ev[b:]):
                        w.write(chunk(piece))
                        await w.drain()
                        await asyncio.sleep(0.003)
                else:
                    log.event_ns.append(perf_counter_ns())
                    w.write(chunk(ev))
                    await w.drain()
                if mode == "split":
                    log.event_ns.append(perf_counter_ns())
                if mode == "error_event" and sent >= n // 2:
                    w.write(chunk(event({"error": {"message": "synthetic mid-stream error", "code": 500}})))
                    break
                if mode == "cut" and sent >= n // 2:
                    await w.drain()
                    w.transport.abort()
                    return False
                if mode == "stall" and sent >= 2:
                    await asyncio.sleep(3600)
                if sent < n and itl:
                    await asyncio.sleep(itl)
            if events:
                w.write(chunk(b"".join(events)))
            log.tokens = sent
            self.tokens_predicted_total += sent
            fin = content("")
            fin["choices"][0]["finish_reason"] = "length"
            fin["timings"] = {"prompt_n": len(prompt), "prompt_ms": 1.0, "predicted_n": sent, "cache_n": 0}
            w.write(chunk(event(fin)))
            if mode != "nousage":
                u = {
                    "id": "x",
                    "object": obj,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": len(prompt),
                        "completion_tokens": sent,
                        "total_tokens": len(prompt) + sent,
                    },
                    "x_server": {"recv_ns": log.recv_ns, "event_ns": log.event_ns},
                }
                w.write(chunk(event(u)))
            if mode == "nofinal":
                w.write(chunk(b"data: [DONE]"))
            else:
                w.write(chunk(event("[DONE]")))
            w.write(b"0\r\n\r\n")
            await w.drain()
            if mode == "close_after":
                await asyncio.sleep(0.002)  # after the client has pooled the connection, as llama-server does
                return False
        finally:
            self.processing -= 1
        return True


async def _main(args: argparse.Namespace) -> None:
    cycle = tuple(args.mode.removeprefix("cycle:").split(",")) if args.mode else ()
    unknown = [m for m in cycle if m not in MODES]
    if unknown:
        raise SystemExit(f"--mode: unknown behaviour(s) {unknown}; known: {', '.join(MODES)}")
    srv = SyntheticServer(
        host=args.host, port=args.port, ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, cycle=cycle
    )
    await srv.start()
    print(f"PORT {srv.port}", flush=True)
    if args.serve_forever:  # a fake engine: its launcher stops it with a signal
        await asyncio.Event().wait()
    loop = asyncio.get_running_loop()
    # Exit when the parent closes our stdin: no orphan server if the benchmark dies.
    await loop.run_in_executor(None, sys.stdin.read)
    await srv.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--mode", default="", help="cycle:MODE,MODE,...: the behaviour of each request in turn")
    p.add_argument("--serve-forever", action="store_true", help="ignore stdin (run as a fake engine)")
    a, _ = p.parse_known_args()  # a launcher's other engine flags (-m, -c, -np, ...) mean nothing here
    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.run(_main(a))
    except ImportError:
        asyncio.run(_main(a))
