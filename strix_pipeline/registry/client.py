"""A small OCI distribution / Docker Hub client: tags, digests, manifests and labels.

- Tags come from ``GET /v2/<name>/tags/list?n=<k>`` following the ``Link: <...>; rel="next"`` header
  (Docker Hub and ghcr.io page; distribution 2.x ignores ``n`` and answers everything at once: both
  work). On Docker Hub the Hub API (``/v2/namespaces/{ns}/repositories/{repo}/tags``) is used instead
  because it also gives each tag's digest and ``last_updated`` for free (no HEAD per tag).
- A tag's digest comes from ``HEAD /v2/<name>/manifests/<tag>`` with the full ``Accept`` list: HEAD does
  not count against Docker Hub's pull limit, a manifest GET does, so manifests and config blobs are
  fetched only for a digest not seen before (the caller decides; see discovery.py).
- For an index (OCI index / Docker manifest list) the linux/amd64 manifest is picked; an index without
  one raises ``NoPlatform`` with the platforms it does list, so the caller can skip it with a reason.

How requests are sent (auth, retries, rate limits, deadline): transport.py.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import httpx

from strix_pipeline.registry.errors import MalformedResponse, NoPlatform, RegistryError
from strix_pipeline.registry.names import DOCKER_HUB_API, api_repository, is_docker_hub
from strix_pipeline.registry.transport import RegistryTransport, RetryPolicy

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT_ALL = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
ACCEPT_MANIFEST = ", ".join(MANIFEST_TYPES)

WANTED_PLATFORM = ("linux", "amd64")


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


@dataclass(frozen=True)
class ImageSize:
    """The bytes a pull downloads, as the image's manifest states them."""

    digest: str  # what the reference points at (index or manifest)
    manifest_digest: str  # the linux/amd64 image manifest whose sizes these are
    config_bytes: int
    layer_bytes: tuple[int, ...]

    @property
    def total_bytes(self) -> int:
        return self.config_bytes + sum(self.layer_bytes)


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


class RegistryClient(RegistryTransport):
    """One registry's tags, digests and image details."""

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
        super().__init__(
            registry,
            insecure=insecure,
            username=username,
            password=password,
            policy=policy,
            sleep=sleep,
            transport=transport,
        )
        self.hub_api = (
            hub_api if hub_api is not None else (DOCKER_HUB_API if is_docker_hub(registry) else None)
        )

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

    def image_size(self, repository: str, reference: str) -> ImageSize:
        """What a pull of ``reference`` downloads, from its manifest alone (no blob is fetched): the
        layers' and the config's ``size`` fields (OCI image manifest: each descriptor's size in bytes),
        of the linux/amd64 manifest when ``reference`` is an index. Compressed bytes: the disk holds
        more once unpacked, which the disk check's margin covers (hosts/cleanup/disk_budget.py)."""
        top_digest, manifest_digest, _, manifest = self._platform_manifest(repository, reference)
        parts = [manifest.get("config"), *(manifest.get("layers") or [])]
        sizes: list[int] = []
        for d in parts:
            size = d.get("size") if isinstance(d, dict) else None
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise self._err(
                    MalformedResponse,
                    f"{reference}: a descriptor without a byte size: {d!r}"[:300],
                    repository,
                )
            sizes.append(size)
        return ImageSize(
            digest=top_digest,
            manifest_digest=manifest_digest,
            config_bytes=sizes[0],
            layer_bytes=tuple(sizes[1:]),
        )

    def _platform_manifest(self, repository: str, reference: str) -> tuple[str, str, str, dict[str, Any]]:
        """(digest of ``reference``, digest of its linux/amd64 image manifest, media type, manifest)."""
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
        if media_type not in MANIFEST_TYPES or not isinstance(manifest, dict):
            raise self._err(
                MalformedResponse, f"{reference}: unsupported manifest type {media_type!r}", repository
            )
        return top_digest, manifest_digest, media_type, manifest

    def image_details(self, repository: str, reference: str) -> ImageDetails:
        """Manifest (linux/amd64 from an index) and config blob: created time and labels."""
        top_digest, manifest_digest, media_type, manifest = self._platform_manifest(repository, reference)
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
                f"{reference}: index has no linux/amd64 manifest (has "
                f"{', '.join(sorted(set(found))) or 'none'})",
                repository,
            )
        return sorted(candidates)[0][1]
