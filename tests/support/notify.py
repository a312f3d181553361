"""A webhook receiver on loopback that keeps what it was sent, and a confirmed regression to send."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from strix_pipeline.analysis.changepoints import Change

NOW = datetime(2026, 9, 21, tzinfo=UTC)


class Receiver:
    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                outer.bodies.append(json.loads(self.rfile.read(n)))
                self.send_response(outer.status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def regression(**kw) -> Change:
    base = Change(
        "abc123",
        "fp/concurrency_sweep",
        "vllm",
        "strix-halo",
        "ttft_p95_ms",
        "concurrency_sweep",
        5,
        "v0.10.0",
        "v0.11.0",
        "v0.11.0",
        12.5,
        1e-5,
        "confirmed",
        "active",
        None,
        NOW,
        direction="regression",
        newly_confirmed=True,
    )
    return replace(base, **kw)
