"""A small OCI distribution / Docker Hub client on httpx, made to be polite to rate-limited registries.

What it does, and why it is shaped this way:

- Tags come from ``GET /v2/<name>/tags/list?n=<k>`` following the ``Link: <...>; rel="next"`` header
  (Docker Hub and ghcr.io page; distribution 2.x ignores ``n`` and answers everything at once: both
  work). On Docker Hub the Hub API (``/v2/namespaces/{ns}/repositories/{repo}/tags``) is used instead
  because it also gives each tag's digest and ``last_updated`` for free (no HEAD per tag).
- Auth is driven by the registry's ``401`` challenge: ``Bearer realm,service,scope`` -> a token from
  the realm (anonymous, or with the configured credentials), cached per scope; ``Basic`` -> the
  configured credentials. Nothing is sent before a registry asks for it.
- A tag's digest comes from ``HEAD /v2/<name>/manifests/<tag>`` with the full ``Accept`` list: HEAD does
  not count against Docker Hub's pull limit, a manifest GET does, so manifests and config blobs are
  fetched only for a digest not seen before (the caller decides; see discovery.py).
- For an index (OCI index / Docker manifest list) the linux/amd64 manifest is picked; an index without
  one raises ``NoPlatform`` with the platforms it does list, so the caller can skip it with a reason.
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
import hashlib
import json
import random
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import httpx

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT_ALL = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
ACCEPT_MANIFEST = ", ".join(MANIFEST_TYPES)

DOCKER_HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io")
DOCKER_HUB_API = "https://hub.docker.com"
WANTED_PLATFORM = ("linux", "amd64")
_MAX_BODY = 32 * 1024 * 1024  # a tags page or manifest larger than this is not one we should parse


class RegistryError(Exception):
    """Anything that stops us reading a repository; ``str()`` is what the warehouse records."""

    def __init__(self, message: str, *, registry: str = "", repository: str = "", status: int | None = None):
        super().__init__(message)
        self.registry = registry
        self.repository = repository
        self.status = status


class RegistryUnavailable(RegistryError):
    """Unreachable, timing out or answering 5xx after every retry."""

    def __init__(self, message: str, *, unreachable: bool = False, **kw: Any):
        super().__init__(message, **kw)
        self.unreachable = (
            unreachable  # no connection at all (DNS, refused): other repositories there will fail too
        )


class RateLimited(RegistryError):
    """429 (or an exhausted pull budget) for longer than we are willing to wait."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after_s = retry_after_s


class AuthError(RegistryError):
    """The registry refused the credentials (or demands some we do not have)."""


class NotFound(RegistryError):
    """404 for a repository, tag or blob."""


class MalformedResponse(RegistryError):
    """A body that is not the JSON (or digest) the protocol promises."""


class NoPlatform(RegistryError):
    """An index with no linux/amd64 manifest: skip the tag with this reason, it is not a failure."""


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


@dataclass(frozen=True)
class TagInfo:
    name: str
    digest: str | None = None  # known without a HEAD (Docker Hub API)
    last_updated: datetime | None = None
    platforms: tuple[str, ...] | None = None  # "os/arch" of the tag's images when the API says


@dataclass(frozen=True)
class ImageDetails:
    digest: str  # what the tag points at (index or manifest)
    manifest_digest: str  # the linux/amd64 image manifest
    media_type: str
    created: datetime | None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def version(self) -> str | None:
        return self.labels.get("org.opencontainers.image.version")

    @property
    def revision(self) -> str | None:
        return self.labels.get("org.opencontainers.image.revision")


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="...",scope="..."`` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)\s*=\s*"([^"]*)"', rest)}
    for k, v in re.findall(r'(\w+)\s*=\s*([^",\s]+)', rest):  # unquoted values, rare but legal
        params.setdefault(k.lower(), v)
    return scheme.lower(), params


def parse_time(value: Any) -> datetime | None:
    """RFC 3339 with up to nanoseconds (Go writes 9 digits; fromisoformat takes 6) -> aware UTC."""
    if not isinstance(value, str) or not value:
        return None
    m = re.match(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$", value.strip())
    if not m:
        return None
    base, frac, tz = m.groups()
    text = base + (frac[:7] if frac else "") + ("+00:00" if tz in (None, "Z") else tz)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.year < 1971:  # docker import of some tools writes the zero time: that is "unknown"
        return None
    return dt.astimezone(UTC)


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


def api_host(registry: str) -> str:
    return "registry-1.docker.io" if registry in DOCKER_HUB_NAMES else registry


def api_repository(registry: str, repository: str) -> str:
    """Docker Hub's official images live under ``library/``."""
    if registry in DOCKER_HUB_NAMES and "/" not in repository:
        return f"library/{repository}"
    return repository


class RegistryClient:
    """One registry. Use as a context manager; not thread-safe (one refresh at a time)."""

    def __init__(
        self,
        registry: str,
        *,
        insecure: bool = False,
        username: str | None = None,
        password: str | None = None,
        policy: RetryPolicy | None = None,
        hub_api: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ):
        self.registry = registry
        self.host = api_host(registry)
        self.base_url = f"{'http' if insecure else 'https'}://{self.host}"
        self.policy = policy or RetryPolicy()
        self.hub_api = (
            hub_api if hub_api is not None else (DOCKER_HUB_API if registry in DOCKER_HUB_NAMES else None)
        )
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

    def __enter__(self) -> RegistryClient:
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

    # -- public API -----------------------------------------------------------------------------

    def list_tags(
        self, repository: str, *, page_size: int = 100, max_tags: int = 5000, prefix: str | None = None
    ) -> tuple[list[str], bool]:
        """All tags (up to ``max_tags``) following ``Link``; returns (tags, complete).

        With ``prefix``, listing starts just before the tags with that prefix (``last=``) and stops once
        a page goes past them: a repository of 20,000 tags (ghcr.io's llama.cpp) costs the few pages
        that matter. Registries answer in lexical order (OCI spec); one that ignores ``last`` still
        gives a correct (longer) listing, since tags outside the prefix are only extra."""
        name = api_repository(self.registry, repository)
        query: dict[str, str | int] = {"n": page_size}
        if prefix and len(prefix) > 1:
            query["last"] = prefix[:-1]  # a valid tag name sorting before every tag with the prefix
        url = f"{self.base_url}/v2/{name}/tags/list?{urlencode(query)}"
        tags: list[str] = []
        max_pages = max_tags // max(1, min(page_size, max_tags)) + 50

        def next_url(resp: httpx.Response, body: Any) -> str | None:
            nxt = resp.links.get("next", {}).get("url")
            return str(resp.url.join(nxt)) if nxt else None

        for body in self._pages(url, repository, "tags/list", max_pages, next_url):
            page = body.get("tags") if isinstance(body, dict) else None
            if page is None and isinstance(body, dict) and "tags" in body:
                page = []  # distribution answers "tags": null for a repository with no tags
            if not isinstance(page, list) or not all(isinstance(t, str) for t in page):
                raise self._err(MalformedResponse, "tags/list: no list of strings under 'tags'", repository)
            if prefix:
                tags.extend(t for t in page if t.startswith(prefix))
                past = page and page[-1] > prefix and not page[-1].startswith(prefix)
                if past and page == sorted(page):  # distribution 2.8 answers unsorted: then read on
                    return tags[:max_tags], len(tags) <= max_tags  # past the prefix: the rest sorts later
            else:
                tags.extend(page)
            if len(tags) >= max_tags:
                return tags[:max_tags], False
        return tags, True

    def hub_tags(
        self, repository: str, *, page_size: int = 100, max_tags: int = 5000
    ) -> tuple[list[TagInfo], bool]:
        """Docker Hub's tags API: names with digest and last_updated, following ``next``."""
        if not self.hub_api:
            raise RegistryError(
                "no Docker Hub API for this registry", registry=self.registry, repository=repository
            )
        ns, _, repo = api_repository(self.registry, repository).partition("/")
        url = f"{self.hub_api}/v2/namespaces/{ns}/repositories/{repo}/tags?page_size={min(page_size, 100)}"
        out: list[TagInfo] = []
        max_pages = max_tags // min(page_size, 100) + 50

        def next_url(resp: httpx.Response, body: Any) -> str | None:
            nxt = body.get("next")
            if nxt is not None and not isinstance(nxt, str):
                raise self._err(MalformedResponse, "hub tags: 'next' is not a URL", repository)
            return str(resp.url.join(nxt)) if nxt else None

        for body in self._pages(url, repository, "hub tags", max_pages, next_url, registry_auth=False):
            results = body.get("results") if isinstance(body, dict) else None
            if not isinstance(results, list):
                raise self._err(MalformedResponse, "hub tags: no list under 'results'", repository)
            for item in results:
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    raise self._err(MalformedResponse, "hub tags: a result without a name", repository)
                platforms = None
                images = item.get("images")
                if isinstance(images, list) and images:
                    platforms = tuple(
                        f"{i.get('os')}/{i.get('architecture')}" for i in images if isinstance(i, dict)
                    )
                digest = item.get("digest")
                out.append(
                    TagInfo(
                        name=item["name"],
                        digest=digest if isinstance(digest, str) and digest.startswith("sha256:") else None,
                        last_updated=parse_time(item.get("last_updated") or item.get("tag_last_pushed")),
                        platforms=platforms,
                    )
                )
            if len(out) >= max_tags:
                return out[:max_tags], False
        return out, True

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

    def head_digest(self, repository: str, reference: str) -> tuple[str, str]:
        """(digest, media type) of what ``reference`` points at, from a HEAD (free on Docker Hub)."""
        url = self._manifest_url(repository, reference)
        resp = self._request("HEAD", url, repository=repository, accept=ACCEPT_ALL)
        digest = resp.headers.get("Docker-Content-Digest", "")
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        if digest.startswith("sha256:") and len(digest) == 71:
            return digest, media_type
        # Some registries omit the header on HEAD: the digest is then the hash of the GET body.
        resp = self._request("GET", url, repository=repository, accept=ACCEPT_ALL)
        return "sha256:" + hashlib.sha256(resp.content).hexdigest(), media_type

    def image_details(self, repository: str, reference: str) -> ImageDetails:
        """Manifest (linux/amd64 from an index) and config blob: created time and labels."""
        resp = self._request(
            "GET", self._manifest_url(repository, reference), repository=repository, accept=ACCEPT_ALL
        )
        top_digest = self._checked_digest(resp, reference, repository)
        manifest = self._json(resp, repository)
        media_type = self._media_type(resp, manifest)
        manifest_digest = top_digest
        if media_type in INDEX_TYPES:
            manifest_digest = self._pick_platform(manifest, repository, reference)
            resp = self._request(
                "GET",
                self._manifest_url(repository, manifest_digest),
                repository=repository,
                accept=ACCEPT_MANIFEST,
            )
            self._checked_digest(resp, manifest_digest, repository)
            manifest = self._json(resp, repository)
            media_type = self._media_type(resp, manifest)
        if media_type not in MANIFEST_TYPES:
            raise self._err(
                MalformedResponse, f"{reference}: unsupported manifest type {media_type!r}", repository
            )
        config = manifest.get("config") if isinstance(manifest, dict) else None
        config_digest = config.get("digest") if isinstance(config, dict) else None
        if not isinstance(config_digest, str) or not config_digest.startswith("sha256:"):
            raise self._err(MalformedResponse, f"{reference}: manifest without a config digest", repository)
        name = api_repository(self.registry, repository)
        blob = self._request("GET", f"{self.base_url}/v2/{name}/blobs/{config_digest}", repository=repository)
        if "sha256:" + hashlib.sha256(blob.content).hexdigest() != config_digest:
            raise self._err(
                MalformedResponse, f"{reference}: config blob does not match {config_digest}", repository
            )
        cfg = self._json(blob, repository)
        if not isinstance(cfg, dict):
            raise self._err(MalformedResponse, f"{reference}: config blob is not a JSON object", repository)
        inner = cfg.get("config") if isinstance(cfg.get("config"), dict) else {}
        raw_labels = inner.get("Labels") or {}
        if not isinstance(raw_labels, dict):
            raise self._err(MalformedResponse, f"{reference}: config Labels is not an object", repository)
        labels = {str(k): str(v) for k, v in raw_labels.items()}
        return ImageDetails(
            digest=top_digest,
            manifest_digest=manifest_digest,
            media_type=media_type,
            created=parse_time(cfg.get("created")),
            labels=labels,
        )

    # -- internals ------------------------------------------------------------------------------

    def _manifest_url(self, repository: str, reference: str) -> str:
        return f"{self.base_url}/v2/{api_repository(self.registry, repository)}/manifests/{reference}"

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

    def _media_type(self, resp: httpx.Response, manifest: Any) -> str:
        if isinstance(manifest, dict) and isinstance(manifest.get("mediaType"), str):
            return manifest["mediaType"]
        return resp.headers.get("Content-Type", "").split(";")[0].strip()

    def _checked_digest(self, resp: httpx.Response, reference: str, repository: str) -> str:
        actual = "sha256:" + hashlib.sha256(resp.content).hexdigest()
        if reference.startswith("sha256:") and actual != reference:
            raise self._err(MalformedResponse, f"manifest body does not match {reference}", repository)
        header = resp.headers.get("Docker-Content-Digest")
        if header and header != actual:
            raise self._err(
                MalformedResponse, f"manifest body does not match its digest header {header}", repository
            )
        return actual

    def _pick_platform(self, index: Any, repository: str, reference: str) -> str:
        entries = index.get("manifests") if isinstance(index, dict) else None
        if not isinstance(entries, list):
            raise self._err(MalformedResponse, f"{reference}: index without 'manifests'", repository)
        found: list[str] = []
        candidates: list[tuple[int, str]] = []
        for e in entries:
            if not isinstance(e, dict) or not isinstance(e.get("digest"), str):
                raise self._err(MalformedResponse, f"{reference}: index entry without a digest", repository)
            plat = e.get("platform") if isinstance(e.get("platform"), dict) else {}
            os_, arch = plat.get("os"), plat.get("architecture")
            found.append(f"{os_}/{arch}" + (f"/{plat['variant']}" if plat.get("variant") else ""))
            if (os_, arch) == WANTED_PLATFORM:
                candidates.append((1 if plat.get("variant") else 0, e["digest"]))  # plain amd64 first
        if not candidates:
            raise self._err(
                NoPlatform,
                f"{reference}: index has no linux/amd64 manifest (has {', '.join(sorted(set(found))) or 'none'})",
                repository,
            )
        return sorted(candidates)[0][1]

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


# -- version order ----------------------------------------------------------------------------------
# The rule is documented in discovery.py's module docstring (the place people look for it).

_SEMVER = re.compile(
    r"(?:^|[^0-9A-Za-z])v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?"  # 0.10.1 or 0.10.1.1 (vLLM uses 4 parts)
    r"(?:\.?post(\d+))?"  # SGLang's v0.5.5.post3
    r"(?:[-.]?((?:rc|alpha|beta|dev|pre|a|b)\d*(?:\.\d+)*))?"  # pre-releases sort before the release
    r"(?=$|[^0-9A-Za-z]|-)",
    re.IGNORECASE,
)
_BUILD = re.compile(r"(?:^|[-_.])b(\d+)(?=$|[-_.])")
_DATE = re.compile(r"(?<!\d)(20\d{2})[-.]?(0[1-9]|1[0-2])[-.]?(0[1-9]|[12]\d|3[01])(?!\d)")


def _pad_numbers(text: str) -> str:
    return re.sub(r"\d+", lambda m: m.group(0).zfill(10), text)


def version_sort_key(tag: str, created: datetime | None) -> str:
    """A string whose lexical order is the version order (rule: see discovery.py)."""
    m = _SEMVER.search(tag)
    if m and int(m.group(1)) < 1000:  # 2026.01.15 is a date, not version 2026
        nums = [int(g) if g else 0 for g in m.group(1, 2, 3, 4)]
        post = int(m.group(5) or 0)
        pre = m.group(6)
        release = "~" if pre is None else "-" + _pad_numbers(pre.lower())  # "~" sorts after any pre-release
        body = ".".join(f"{n:06d}" for n in nums) + f".p{post:06d}{release}"
        return f"3|{body}|{tag}"
    b = _BUILD.search(tag)
    if b:
        return f"2|{int(b.group(1)):010d}|{tag}"
    d = _DATE.search(tag)
    if d:
        day = f"{d.group(1)}-{d.group(2)}-{d.group(3)}"
        clock = "00:00:00"
        if created is not None:
            c = created.astimezone(UTC)
            if c.strftime("%Y-%m-%d") == day:
                clock = c.strftime("%H:%M:%S")
        return f"1|{day}T{clock}|{tag}"
    if created is not None:
        return f"1|{created.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S')}|{tag}"
    return f"0|{tag}"
