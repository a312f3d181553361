"""A production engine's health URL on loopback that can be stopped and started again on its port, the
way a Box's production goes down and comes back."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path == "/health"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}' if ok else b"")

    def log_message(self, *a) -> None:
        pass


class ProductionHealth:
    """``url`` answers 200 while started; nothing listens on its port while stopped."""

    def __init__(self) -> None:
        self.port = 0
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.start()
        self.url = f"http://127.0.0.1:{self.port}/health"

    def start(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), _Health)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            assert self.thread is not None
            self.thread.join(timeout=5)
            self.server = None
