"""Loopback fronts placed between the client and a real docker-registry, to reproduce what public
registries do and distribution 2.8 does not: paging tags/list with ``Link`` (Docker Hub, ghcr.io),
demanding a Bearer token from a token service, the Docker Hub tags API, and injected faults.

Everything that is not intercepted is proxied verbatim to the real registry, so digests, manifests and
blobs are the registry's own.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx


@dataclass
class Fault:
    """What the front answers instead of the registry.

    ``stall_s``: wait this long before answering (a registry that accepts and never answers, for any
    client whose read timeout is shorter). ``upstream``: answer the registry's own response (status,
    headers, body) rather than ``status``/``headers``/``body``. ``cut_at``: promise the whole body in
    Content-Length, send only its first ``cut_at`` bytes and close the connection (a body cut short).
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stall_s: float = 0.0
    upstream: bool = False
    cut_at: int | None = None


@dataclass
class _Armed:
    rx: re.Pattern[str]
    fault: Fault
    method: str | None
    skip: int  # matching requests still let through before this fault fires


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


class Front:
    """A loopback HTTP front to ``upstream`` (e.g. "http://127.0.0.1:5000"); start()/stop() or ``with``."""

    def __init__(
        self,
        upstream: str,
        *,
        page_size: int | None = None,
        bearer: bool = False,
        token_credentials: tuple[str, str] | None = None,
        hub: bool = False,
        hub_page_size: int = 100,
    ):
        self.upstream = upstream.rstrip("/")
        self.page_size = page_size
        self.bearer = bearer
        self.token_credentials = token_credentials
        self.hub = hub
        self.hub_page_size = hub_page_size
        self.faults: list[_Armed] = []
        self.seen: list[Seen] = []
        self.tokens: dict[str, str] = {}  # token -> scope
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # ends stalls at stop()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control --------------------------------------------------------------------------------

    def add_fault(
        self, path_regex: str, fault: Fault, times: int = 1, *, after: int = 0, method: str | None = None
    ) -> None:
        """The next ``times`` requests whose path matches (and whose method is ``method``, when given)
        get ``fault`` instead of the registry, once ``after`` matching requests have gone through."""
        rx = re.compile(path_regex)
        with self._lock:
            self.faults.extend(_Armed(rx, fault, method, after if i == 0 else 0) for i in range(times))

    def requests_to(self, path_regex: str, method: str | None = None) -> list[Seen]:
        rx = re.compile(path_regex)
        return [s for s in self.seen if rx.search(s.path) and (method is None or s.method == method)]

    @property
    def host(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def start(self) -> Front:
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                front._handle(self, "GET")

            def do_HEAD(self) -> None:
                front._handle(self, "HEAD")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Front:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling -----------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query)
        with self._lock:
            self.seen.append(Seen(method, parts.path, query, {k.lower(): v for k, v in h.headers.items()}))
            fault = None
            for i, armed in enumerate(self.faults):
                if armed.rx.search(parts.path) and armed.method in (None, method):
                    if armed.skip:
                        armed.skip -= 1
                    else:
                        fault = self.faults.pop(i).fault
                    break
        if fault is not None:
            return self._fault(h, method, fault)
        if parts.path == "/token":
            return self._token(h, method, query)
        if self.hub and parts.path.startswith("/v2/namespaces/"):
            return self._hub_tags(h, method, parts.path, query)
        if self.bearer and parts.path.startswith("/v2/"):
            token = (h.headers.get("Authorization") or "").removeprefix("Bearer ")
            m = re.match(r"^/v2/(.+?)/(tags|manifests|blobs)/", parts.path)
            need = f"repository:{m.group(1)}:pull" if m else None
            if token not in self.tokens or (need and self.tokens[token] != need):
                challenge = f'Bearer realm="{self.url}/token",service="strix-test"'
                if need:
                    challenge += f',scope="{need}"'
                body = json.dumps(
                    {"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]}
                )
                return self._reply(h, method, 401, {"WWW-Authenticate": challenge}, body.encode())
        m = re.match(r"^/v2/(.+)/tags/list$", parts.path)
        if m and self.page_size:
            return self._paged_tags(h, method, m.group(1), query)
        return self._proxy(h, method, h.path)

    def _reply(
        self, h: BaseHTTPRequestHandler, method: str, status: int, headers: dict[str, str], body: bytes
    ) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        if not any(k.lower() == "content-length" for k in headers):
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if method != "HEAD":
            h.wfile.write(body)

    def _fault(self, h: BaseHTTPRequestHandler, method: str, fault: Fault) -> None:
        if fault.stall_s:
            self._stopping.wait(fault.stall_s)
        status, headers, body = (
            self._fetch(h, "GET" if method == "HEAD" else method, h.path)
            if fault.upstream
            else (fault.status, fault.headers, fault.body)
        )
        try:
            if fault.cut_at is None:
                return self._reply(h, method, status, headers, body)
            h.send_response(status)
            for k, v in headers.items():
                if k.lower() != "content-length":
                    h.send_header(k, v)
            h.send_header("Content-Length", str(len(body)))  # the whole body is promised ...
            h.end_headers()
            h.wfile.write(body[: fault.cut_at])  # ... and only a part of it sent
            h.wfile.flush()
            h.close_connection = True
        except OSError:
            pass  # the client gave up first (its timeout was shorter than the stall)

    def _fetch(self, h: BaseHTTPRequestHandler, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
        headers = {k: v for k, v in h.headers.items() if k.lower() in ("accept", "authorization")}
        if self.bearer:
            headers.pop("Authorization", None)  # the token is ours, not the registry's
        with httpx.Client(timeout=30) as c:
            r = c.request(method, self.upstream + path, headers=headers)
        keep = (
            "content-type",
            "docker-content-digest",
            "www-authenticate",
            "link",
            "location",
            "content-length",
        )
        return r.status_code, {k: v for k, v in r.headers.items() if k.lower() in keep}, r.content

    def _proxy(self, h: BaseHTTPRequestHandler, method: str, path: str) -> None:
        self._reply(h, method, *self._fetch(h, method, path))

    def _upstream_tags(self, name: str) -> list[str]:
        with httpx.Client(timeout=30) as c:
            r = c.get(f"{self.upstream}/v2/{name}/tags/list")
        r.raise_for_status()
        return sorted(r.json().get("tags") or [])

    def _paged_tags(
        self, h: BaseHTTPRequestHandler, method: str, name: str, query: dict[str, list[str]]
    ) -> None:
        # Docker Hub / ghcr.io style: n capped by the server, `last` exclusive, a relative Link.
        assert self.page_size
        n = min(int(query.get("n", [self.page_size])[0]), self.page_size)
        last = query.get("last", [None])[0]
        tags = self._upstream_tags(name)
        start = 0 if last is None else next((i for i, t in enumerate(tags) if t > last), len(tags))
        page = tags[start : start + n]
        headers = {"Content-Type": "application/json"}
        if start + n < len(tags):
            nxt = f"/v2/{name}/tags/list?{urlencode({'last': page[-1], 'n': n})}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._reply(h, method, 200, headers, json.dumps({"name": name, "tags": page}).encode())

    def _hub_tags(
        self, h: BaseHTTPRequestHandler, method: str, path: str, query: dict[str, list[str]]
    ) -> None:
        m = re.match(r"^/v2/namespaces/([^/]+)/repositories/([^/]+)/tags$", path)
        if not m:
            return self._reply(h, method, 404, {}, b"{}")
        name = f"{m.group(1)}/{m.group(2)}"
        size = min(int(query.get("page_size", [10])[0]), self.hub_page_size)
        page_no = int(query.get("page", [1])[0])
        tags = self._upstream_tags(name)
        chunk = tags[(page_no - 1) * size : page_no * size]
        results = []
        with httpx.Client(timeout=30) as c:
            for t in chunk:
                r = c.head(
                    f"{self.upstream}/v2/{name}/manifests/{t}",
                    headers={
                        "Accept": "application/vnd.oci.image.index.v1+json, "
                        "application/vnd.docker.distribution.manifest.list.v2+json, "
                        "application/vnd.oci.image.manifest.v1+json, "
                        "application/vnd.docker.distribution.manifest.v2+json"
                    },
                )
                results.append(
                    {
                        "name": t,
                        "digest": r.headers.get("Docker-Content-Digest"),
                        "last_updated": "2026-11-02T10:00:00.123456Z",
                        "images": [{"architecture": "amd64", "os": "linux"}],
                    }
                )
        nxt = None
        if page_no * size < len(tags):
            nxt = f"{self.url}{path}?{urlencode({'page_size': size, 'page': page_no + 1})}"
        body = {"count": len(tags), "next": nxt, "previous": None, "results": results}
        self._reply(h, method, 200, {"Content-Type": "application/json"}, json.dumps(body).encode())

    def _token(self, h: BaseHTTPRequestHandler, method: str, query: dict[str, list[str]]) -> None:
        if self.token_credentials:
            import base64

            want = "Basic " + base64.b64encode(":".join(self.token_credentials).encode()).decode()
            if h.headers.get("Authorization") != want:
                return self._reply(h, method, 401, {}, b'{"details":"bad credentials"}')
        scope = query.get("scope", [""])[0]
        if query.get("service", [""])[0] != "strix-test" or not scope:
            return self._reply(h, method, 400, {}, b'{"details":"service and scope required"}')
        token = secrets.token_hex(16)
        with self._lock:
            self.tokens[token] = scope
        body = json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode()
        self._reply(h, method, 200, {"Content-Type": "application/json"}, body)


def recording_sleep() -> tuple[list[float], Callable[[float], None]]:
    """A sleep that records what was asked and returns at once: tests stay fast and can check waits."""
    waits: list[float] = []
    return waits, waits.append
