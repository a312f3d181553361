"""How the registry client talks HTTP: auth from the registry's challenge, retries, rate limits and a
deadline, made to be polite to rate-limited registries.

- Auth is driven by the registry's ``401`` challenge: ``Bearer realm,service,scope`` -> a token from
  the realm (anonymous, or with the configured credentials), cached per scope; ``Basic`` -> the
  configured credentials. Nothing is sent before a registry asks for it.
- Faults (:class:`RetryPolicy`; discovery's clients use 3 attempts, 0.5 s backoff doubling to at most
  4 s with +-25 % jitter, 3 s connect and 20 s read timeouts): ``429`` waits for ``Retry-After``
  (seconds or HTTP date) or the rate-limit reset header (else the backoff) when that is at most
  ``max_wait_s`` (120 s) and fits the deadline, and is otherwise :class:`RateLimited` at once; the
  last attempt's 429 is :class:`RateLimited` too. ``5xx``, timeouts and dropped or cut-short
  connections are retried with the backoff, then :class:`RegistryUnavailable`; a name that does not
  resolve fails at once (retrying DNS in a sandbox only burns the budget). Every request also respects
  an optional deadline -- its timeouts shrink to what is left of it -- so one repository's refresh is
  bounded in wall time (discovery: 120 s). A body that is not the JSON we expect raises
  ``MalformedResponse`` (not retried: the registry would say the same again): never a crash, never a
  partial result.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import json
import random
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Self

import httpx

from strix_pipeline.registry.errors import (
    AuthError,
    MalformedResponse,
    NotFound,
    RateLimited,
    RegistryError,
    RegistryUnavailable,
)
from strix_pipeline.registry.names import api_host, api_repository
from strix_pipeline.units import MIB

_MAX_BODY = 32 * MIB  # a tags page or manifest larger than this is not one we should parse


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # per request, first try included
    backoff_s: float = 0.5  # doubled each retry, with jitter
    backoff_max_s: float = 8.0
    max_wait_s: float = 120.0  # longest Retry-After / rate-limit reset we sit out
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 20.0


@dataclass
class RateLimitState:
    """Last rate-limit headers seen (Docker Hub: ``ratelimit-limit: 100;w=21600``, ``X-RateLimit-*``)."""

    limit: int | None = None
    remaining: int | None = None
    window_s: int | None = None
    reset_at: float | None = None  # epoch seconds


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="...",scope="..."`` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)\s*=\s*"([^"]*)"', rest)}
    for k, v in re.findall(r'(\w+)\s*=\s*([^",\s]+)', rest):  # unquoted values, rare but legal
        params.setdefault(k.lower(), v)
    return scheme.lower(), params


def _rate_field(value: str | None) -> tuple[int | None, int | None]:
    """``"76;w=21600"`` -> (76, 21600)."""
    if not value:
        return None, None
    m = re.match(r"\s*(\d+)(?:\s*;\s*w\s*=\s*(\d+))?", value)
    if not m:
        return None, None
    return int(m.group(1)), int(m.group(2)) if m.group(2) else None


def _is_dns_failure(exc: BaseException) -> bool:
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 10:
        if isinstance(e, socket.gaierror):
            return True
        text = str(e)
        if (
            "Name or service not known" in text
            or "name resolution" in text
            or "nodename nor servname" in text
        ):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


class RegistryTransport:
    """Requests to one registry, with its auth, retry policy, rate-limit state and deadline. Use as a
    context manager; not thread-safe (one refresh at a time)."""

    def __init__(
        self,
        registry: str,
        *,
        insecure: bool = False,
        username: str | None = None,
        password: str | None = None,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ):
        self.registry = registry
        self.host = api_host(registry)
        self.base_url = f"{'http' if insecure else 'https'}://{self.host}"
        self.policy = policy or RetryPolicy()
        self.rate_limit = RateLimitState()
        self.requests_made = 0
        self.waits: list[float] = []  # every sleep we did (backoff and Retry-After), for logs and tests
        self._credentials = (username, password) if username and password else None
        self._sleep = sleep
        self._tokens: dict[str, str] = {}  # scope -> bearer token
        self._scheme: str | None = None  # "bearer" / "basic" once the registry has told us
        self._challenge: dict[str, str] = {}
        self._deadline: float | None = None
        timeout = httpx.Timeout(self.policy.read_timeout_s, connect=self.policy.connect_timeout_s)
        self._http = httpx.Client(
            timeout=timeout,
            follow_redirects=True,  # blobs redirect to storage; httpx drops Authorization cross-origin
            transport=transport,
            headers={"User-Agent": "strix-pipeline (+https://github.com/strix-pipeline)"},
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def deadline(self, seconds: float | None) -> Iterator[None]:
        """Bound everything done inside (requests, retries, waits) to ``seconds`` of wall time."""
        previous = self._deadline
        self._deadline = None if seconds is None else time.monotonic() + seconds
        try:
            yield
        finally:
            self._deadline = previous

    def _pages(
        self,
        url: str,
        repository: str,
        what: str,
        max_pages: int,
        next_url: Callable[[httpx.Response, Any], str | None],
        **request: Any,
    ) -> Iterator[Any]:
        """The JSON body of each page of a paginated listing from ``url``, until ``next_url`` of a
        page (its response and body) is None; a listing that comes back to a page it gave, or runs past
        ``max_pages``, is refused."""
        seen: set[str] = set()
        for _ in range(max_pages):
            if url in seen:
                raise self._err(MalformedResponse, f"{what} pagination loops at {url}", repository)
            seen.add(url)
            resp = self._request("GET", url, repository=repository, accept="application/json", **request)
            body = self._json(resp, repository)
            yield body
            nxt = next_url(resp, body)
            if nxt is None:
                return
            url = nxt
        raise self._err(MalformedResponse, f"{what}: more than {max_pages} pages", repository)

    def _err(self, cls: type[RegistryError], message: str, repository: str, **kw: Any) -> RegistryError:
        return cls(
            f"{self.registry}/{repository}: {message}", registry=self.registry, repository=repository, **kw
        )

    def _json(self, resp: httpx.Response, repository: str) -> Any:
        try:
            return json.loads(resp.content)
        except (ValueError, UnicodeDecodeError) as e:
            snippet = resp.content[:80].decode(errors="replace")
            raise self._err(
                MalformedResponse,
                f"{resp.request.method} {resp.url.path}: body is not JSON ({e}): {snippet!r}",
                repository,
            ) from None

    def _note_rate_limit(self, resp: httpx.Response) -> None:
        h = resp.headers
        limit, window = _rate_field(h.get("ratelimit-limit") or h.get("x-ratelimit-limit"))
        remaining, _ = _rate_field(h.get("ratelimit-remaining") or h.get("x-ratelimit-remaining"))
        if limit is not None:
            self.rate_limit.limit, self.rate_limit.window_s = limit, window
        if remaining is not None:
            self.rate_limit.remaining = remaining
        reset = h.get("x-ratelimit-reset") or h.get("ratelimit-reset")
        if reset and reset.strip().isdigit():
            value = int(reset.strip())
            # Docker Hub sends epoch seconds; the IETF draft sends seconds from now.
            self.rate_limit.reset_at = float(value) if value > 10**9 else time.time() + value

    def _retry_after(self, resp: httpx.Response) -> float | None:
        value = resp.headers.get("Retry-After")
        if value:
            value = value.strip()
            if re.fullmatch(r"\d+(\.\d+)?", value):
                return float(value)
            with contextlib.suppress(TypeError, ValueError):
                when = email.utils.parsedate_to_datetime(value)
                return max(0.0, when.timestamp() - time.time())
        if self.rate_limit.reset_at:
            return max(0.0, self.rate_limit.reset_at - time.time())
        return None

    def _remaining_s(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.monotonic()

    def _timeout(self, left: float | None) -> httpx.Timeout:
        # The policy's timeouts, but never past the deadline: a registry that accepts the connection
        # and stalls would otherwise hold one request for the whole read timeout after the budget ran out.
        read, connect = self.policy.read_timeout_s, self.policy.connect_timeout_s
        if left is not None:
            read, connect = min(read, left), min(connect, left)
        return httpx.Timeout(read, connect=connect)

    def _wait(self, seconds: float, why: str, repository: str, *, rate_limited: bool = False) -> None:
        left = self._remaining_s()
        if left is not None and seconds > left:
            message = (
                f"{why}; giving up, waiting {seconds:.0f}s would exceed the time budget for this repository"
            )
            if rate_limited:
                raise self._err(RateLimited, message, repository, retry_after_s=seconds, status=429)
            raise self._err(RegistryUnavailable, message, repository)
        self.waits.append(seconds)
        self._sleep(seconds)

    def _backoff(self, attempt: int) -> float:
        base = min(self.policy.backoff_max_s, self.policy.backoff_s * (2 ** (attempt - 1)))
        return base * (0.75 + random.random() * 0.5)

    def _auth_header(self, repository: str) -> dict[str, str]:
        if self._scheme == "bearer":
            token = self._tokens.get(self._scope(repository))
            return {"Authorization": f"Bearer {token}"} if token else {}
        if self._scheme == "basic" and self._credentials:
            user, password = self._credentials
            raw = base64.b64encode(f"{user}:{password}".encode()).decode()
            return {"Authorization": f"Basic {raw}"}
        return {}

    def _scope(self, repository: str) -> str:
        return f"repository:{api_repository(self.registry, repository)}:pull"

    def _authenticate(self, resp: httpx.Response, repository: str) -> None:
        header = resp.headers.get("WWW-Authenticate", "")
        scheme, params = parse_challenge(header)
        if scheme == "basic":
            if not self._credentials:
                raise self._err(
                    AuthError,
                    "registry demands basic auth and no credentials are configured",
                    repository,
                    status=401,
                )
            self._scheme = "basic"
            return
        if scheme != "bearer" or not params.get("realm"):
            raise self._err(AuthError, f"401 with an unusable challenge {header!r}", repository, status=401)
        self._scheme = "bearer"
        self._challenge = params
        scope = self._scope(repository)
        query = {"scope": scope}
        if params.get("service"):
            query["service"] = params["service"]
        auth = httpx.BasicAuth(*self._credentials) if self._credentials else None
        token_resp = self._send("GET", params["realm"], repository, headers={}, params=query, auth=auth)
        if token_resp.status_code in (401, 403):
            raise self._err(
                AuthError, f"token service refused ({token_resp.status_code})", repository, status=401
            )
        if token_resp.status_code != 200:
            raise self._err(
                RegistryUnavailable,
                f"token service answered {token_resp.status_code}",
                repository,
                status=token_resp.status_code,
            )
        body = self._json(token_resp, repository)
        token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise self._err(MalformedResponse, "token service answered without a token", repository)
        self._tokens[scope] = token

    def _send(
        self,
        method: str,
        url: str,
        repository: str,
        *,
        headers: dict[str, str],
        params: dict[str, str] | None = None,
        auth: httpx.Auth | None = None,
    ) -> httpx.Response:
        """One request with the retry policy for transport errors, 5xx and 429."""
        for attempt in range(1, self.policy.attempts + 1):
            left = self._remaining_s()
            if left is not None and left <= 0:
                raise self._err(
                    RegistryUnavailable,
                    f"{method} {url}: time budget for this repository is spent",
                    repository,
                )
            try:
                self.requests_made += 1
                resp = self._http.request(
                    method, url, headers=headers, params=params, auth=auth, timeout=self._timeout(left)
                )
                if len(resp.content) > _MAX_BODY:
                    raise self._err(
                        MalformedResponse, f"{method} {url}: body larger than {_MAX_BODY} bytes", repository
                    )
            except httpx.TransportError as e:
                what = f"{method} {url}: {type(e).__name__}: {e}"
                if _is_dns_failure(e):
                    raise self._err(
                        RegistryUnavailable, f"{what} (name does not resolve)", repository, unreachable=True
                    ) from None
                if attempt == self.policy.attempts:
                    raise self._err(
                        RegistryUnavailable,
                        f"{what} after {attempt} attempts",
                        repository,
                        unreachable=isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout)),
                    ) from None
                self._wait(self._backoff(attempt), what, repository)
                continue
            self._note_rate_limit(resp)
            if resp.status_code == 429:
                wait = self._retry_after(resp)
                wait = self._backoff(attempt) if wait is None else wait
                if attempt == self.policy.attempts or wait > self.policy.max_wait_s:
                    raise self._err(
                        RateLimited,
                        f"{method} {url}: 429 rate limited (retry after {wait:.0f}s)",
                        repository,
                        retry_after_s=wait,
                        status=429,
                    )
                self._wait(wait, f"{method} {url}: 429", repository, rate_limited=True)
                self.rate_limit.remaining = None  # we waited as told; the next answer says what is left
                continue
            if resp.status_code >= 500:
                if attempt == self.policy.attempts:
                    raise self._err(
                        RegistryUnavailable,
                        f"{method} {url}: {resp.status_code} after {attempt} attempts",
                        repository,
                        status=resp.status_code,
                    )
                self._wait(self._backoff(attempt), f"{method} {url}: {resp.status_code}", repository)
                continue
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(
        self, method: str, url: str, *, repository: str, accept: str | None = None, registry_auth: bool = True
    ) -> httpx.Response:
        """A registry request: auth from the 401 challenge (at most twice), then status checks."""
        rl = self.rate_limit
        window_over = rl.reset_at is not None and rl.reset_at <= time.time()
        if method == "GET" and "/manifests/" in url and rl.remaining == 0 and not window_over:
            # A manifest GET would count against an exhausted pull budget: stop before burning more.
            raise self._err(
                RateLimited, "pull rate limit exhausted (ratelimit-remaining: 0)", repository, status=429
            )
        for _ in range(3):
            headers = {"Accept": accept} if accept else {}
            if registry_auth:
                headers.update(self._auth_header(repository))
            resp = self._send(method, url, repository, headers=headers)
            if resp.status_code == 401 and registry_auth:
                had_auth = "Authorization" in headers
                self._authenticate(resp, repository)
                if had_auth and self._scheme == "basic":
                    raise self._err(AuthError, "registry refused the credentials", repository, status=401)
                continue
            break
        else:
            raise self._err(
                AuthError, f"{method} {url}: still 401 after authenticating", repository, status=401
            )
        if resp.status_code == 404:
            raise self._err(NotFound, f"{method} {resp.url.path}: not found", repository, status=404)
        if resp.status_code in (401, 403):
            raise self._err(
                AuthError,
                f"{method} {resp.url.path}: {resp.status_code}",
                repository,
                status=resp.status_code,
            )
        if resp.status_code >= 400:
            raise self._err(
                RegistryError,
                f"{method} {resp.url.path}: {resp.status_code}",
                repository,
                status=resp.status_code,
            )
        return resp
