"""The Simple API's project page (PEP 503 HTML, PEP 691 JSON) parsed into releases.

Which page is asked for and how: package_index.py. What is read from the page:

- PEP 691 JSON (``meta.api-version`` 1.x; 1.1 adds PEP 700's ``versions``, ``size``, ``upload-time``);
  a file's URL may be relative to the page;
- PEP 503 HTML: one ``<a>`` per file, the link text its name, the hash in the URL fragment
  ``#sha256=...``, PEP 592's ``data-yanked`` (present = yanked, its value the reason), PEP 629's
  ``pypi:repository-version`` meta tag; a page with neither that tag nor one file of the project is
  a web page, not the Simple API;
- a major API version other than 1 is refused (PEP 629: it would not be read meaningfully).

A file's version comes from its name (wheel or sdist, through ``packaging``: PEP 503/440
normalisation); files that are neither, or of another project, are skipped with the reason. A release
is its version's files; it is yanked when every file is (PEP 592: a yanked file is not installed
unless pinned), the reasons kept. A version PEP 700 lists without any file is skipped. Releases are
ordered by ``packaging.version.Version``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from html.parser import HTMLParser
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from strix_pipeline.registry.client import parse_time
from strix_pipeline.registry.errors import MalformedResponse
from strix_pipeline.registry.pip_config import redact_url

__all__ = [
    "ACCEPT",
    "DistFile",
    "PackageReleases",
    "Release",
    "Skipped",
    "parse_project_page",
    "project_url",
]

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
# PEP 691 content negotiation, as pip sends it: JSON preferred, either HTML flavour accepted.
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


@dataclass(frozen=True)
class DistFile:
    """One file of a release as the index lists it."""

    filename: str
    url: str  # absolute, without the hash fragment
    hashes: dict[str, str]  # hash name -> hex digest (may be empty: PEP 503 does not require one)
    kind: str  # "sdist" | "wheel"
    size: int | None = None  # PEP 700
    upload_time: datetime | None = None  # PEP 700
    requires_python: str | None = None
    yanked: bool = False  # PEP 592
    yanked_reason: str | None = None


@dataclass(frozen=True)
class Release:
    """One version of a package: its files, sorted by name."""

    package: str  # normalised name (PEP 503)
    version: Version
    files: tuple[DistFile, ...]

    @property
    def yanked(self) -> bool:
        return all(f.yanked for f in self.files)

    @property
    def yanked_reason(self) -> str | None:
        """The reasons given for the yanked files ("; "-joined), None when yanked without one."""
        reasons = sorted({f.yanked_reason for f in self.files if f.yanked and f.yanked_reason})
        return "; ".join(reasons) or None

    @property
    def upload_time(self) -> datetime | None:
        """When the release's first file was uploaded (PEP 700), None when the index does not say."""
        times = [f.upload_time for f in self.files if f.upload_time is not None]
        return min(times) if times else None


@dataclass(frozen=True)
class Skipped:
    """Something of the page not taken as (or into) a release, and why."""

    name: str  # a filename, or a version
    reason: str


@dataclass(frozen=True)
class PackageReleases:
    """What one project page holds."""

    package: str
    index_url: str  # redacted
    page_url: str  # redacted, after redirects
    api: str  # "json 1.1", "html 1.0", "html" (no version meta)
    releases: list[Release]  # every release, yanked ones included, oldest version first
    skipped: list[Skipped] = field(default_factory=list)
    listed_versions: tuple[str, ...] | None = None  # PEP 700's ``versions`` when given

    @property
    def installable(self) -> list[Release]:
        return [r for r in self.releases if not r.yanked]


def project_url(index_url: str, package: str) -> str:
    """``<index>/<normalised name>/`` (PEP 503: normalised, with the trailing slash)."""
    return index_url.rstrip("/") + "/" + canonicalize_name(package) + "/"


# --- parsing -------------------------------------------------------------------------------------


@dataclass
class _Entry:
    filename: str
    url: str
    hashes: dict[str, str]
    size: int | None = None
    upload_time: datetime | None = None
    requires_python: str | None = None
    yanked: bool = False
    yanked_reason: str | None = None


def _split_fragment(url: str) -> tuple[str, dict[str, str]]:
    """URL without its fragment, and the ``#<hashname>=<hex>`` of PEP 503 as hashes."""
    parts = urlsplit(url)
    hashes = {}
    m = re.fullmatch(r"([A-Za-z0-9_]+)=([0-9A-Fa-f]+)", parts.fragment)
    if m:
        hashes[m.group(1).lower()] = m.group(2).lower()
    return urlunsplit(parts._replace(fragment="")), hashes


def _api_major_ok(version: str, where: str) -> None:
    # PEP 629: a major version above the one we understand means we cannot use the page meaningfully.
    if not re.fullmatch(r"\d+\.\d+", version):
        raise MalformedResponse(f"{where}: repository version {version!r} is not <major>.<minor>")
    if int(version.split(".")[0]) != 1:
        raise MalformedResponse(f"{where}: Simple API version {version} is not one this client reads (1.x)")


def _parse_json(
    body: bytes, page_url: str, url: str
) -> tuple[str, str, list[_Entry], tuple[str, ...] | None]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise MalformedResponse(f"{url}: the Simple API JSON does not parse: {e}") from e
    meta = doc.get("meta") if isinstance(doc, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("api-version"), str):
        raise MalformedResponse(f"{url}: not a Simple API project page (no meta.api-version)")
    _api_major_ok(meta["api-version"], url)
    name, files = doc.get("name"), doc.get("files")
    if not isinstance(name, str) or not isinstance(files, list):
        raise MalformedResponse(f"{url}: a Simple API project page needs a string 'name' and a list 'files'")
    versions = doc.get("versions")
    if versions is not None and not (
        isinstance(versions, list) and all(isinstance(v, str) for v in versions)
    ):
        raise MalformedResponse(f"{url}: 'versions' is not a list of strings (PEP 700)")
    entries = [_json_entry(f, i, page_url, url) for i, f in enumerate(files)]
    return name, "json " + meta["api-version"], entries, tuple(versions) if versions is not None else None


def _json_entry(f: object, i: int, page_url: str, url: str) -> _Entry:
    where = f"{url}: files[{i}]"
    if not isinstance(f, dict):
        raise MalformedResponse(f"{where} is not an object")
    filename, file_url, hashes = f.get("filename"), f.get("url"), f.get("hashes")
    if not isinstance(filename, str) or not isinstance(file_url, str):
        raise MalformedResponse(f"{where} needs string 'filename' and 'url'")
    where = f"{url}: file {filename!r}"
    if not isinstance(hashes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()
    ):
        raise MalformedResponse(f"{where}: 'hashes' is not an object of strings")
    yanked = f.get("yanked", False)
    if not isinstance(yanked, (bool, str)):
        raise MalformedResponse(f"{where}: 'yanked' is {yanked!r}, not a boolean or a reason (PEP 691)")
    size = f.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise MalformedResponse(f"{where}: 'size' is {size!r}, not a byte count (PEP 700)")
    uploaded = f.get("upload-time")
    upload_time = parse_time(uploaded) if uploaded is not None else None
    if uploaded is not None and upload_time is None:
        raise MalformedResponse(f"{where}: 'upload-time' {uploaded!r} is not an ISO 8601 time (PEP 700)")
    requires = f.get("requires-python")
    return _Entry(
        filename=filename,
        url=_split_fragment(urljoin(page_url, file_url))[0],  # PEP 691: the URL may be relative to the page
        hashes={k.lower(): v.lower() for k, v in hashes.items()},
        size=size,
        upload_time=upload_time,
        requires_python=requires if isinstance(requires, str) else None,
        yanked=bool(yanked),
        yanked_reason=yanked if isinstance(yanked, str) and yanked else None,
    )


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self.repository_version: str | None = None
        self.base: str | None = None
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "a":
            self._open, self._text = a, []
        elif tag == "meta" and a.get("name") == "pypi:repository-version":
            self.repository_version = a.get("content") or ""
        elif tag == "base" and a.get("href") and self.base is None:
            self.base = a["href"]

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, "".join(self._text).strip()))
            self._open = None


def _parse_html(body: bytes, url: str, charset: str | None, shown: str) -> tuple[str, list[_Entry]]:
    try:
        text = body.decode(charset or "utf-8")
    except (LookupError, UnicodeDecodeError) as e:
        raise MalformedResponse(f"{shown}: the HTML page does not decode as {charset or 'utf-8'}: {e}") from e
    parser = _Anchors()
    parser.feed(text)
    parser.close()
    if parser.repository_version is not None:
        _api_major_ok(parser.repository_version, shown)
    base = urljoin(url, parser.base) if parser.base else url
    entries = []
    for attrs, label in parser.anchors:
        href = attrs.get("href")
        if not href:
            continue
        file_url, hashes = _split_fragment(urljoin(base, href))
        # PEP 503: the link text is the file name; the URL's last segment when a page leaves it out.
        filename = label or unquote(urlsplit(file_url).path.rsplit("/", 1)[-1])
        entries.append(
            _Entry(
                filename=filename,
                url=file_url,
                hashes=hashes,
                requires_python=attrs.get("data-requires-python"),
                yanked="data-yanked" in attrs,  # PEP 592: present (even empty) means yanked
                yanked_reason=attrs.get("data-yanked") or None,
            )
        )
    api = f"html {parser.repository_version}" if parser.repository_version is not None else "html"
    return api, entries


def _file_version(entry: _Entry, package: str) -> tuple[str, Version] | Skipped:
    name = entry.filename
    try:
        if name.endswith(".whl"):
            project, version, _, _ = parse_wheel_filename(name)
            kind = "wheel"
        else:
            project, version = parse_sdist_filename(name)
            kind = "sdist"
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion) as e:
        return Skipped(name, f"neither a wheel nor an sdist name with a PEP 440 version: {e}")
    if project != package:
        return Skipped(name, f"a file of project {project!r}, not {package!r}")
    return kind, version


def _group(
    package: str, entries: Iterable[_Entry], listed: tuple[str, ...] | None
) -> tuple[list[Release], list[Skipped]]:
    files: dict[Version, list[DistFile]] = {}
    skipped: list[Skipped] = []
    for e in entries:
        got = _file_version(e, package)
        if isinstance(got, Skipped):
            skipped.append(got)
            continue
        kind, version = got
        fields = (e.size, e.upload_time, e.requires_python, e.yanked, e.yanked_reason)
        files.setdefault(version, []).append(DistFile(e.filename, e.url, e.hashes, kind, *fields))
    for v in listed or ():
        try:
            if Version(v) not in files:
                skipped.append(Skipped(v, "listed in 'versions' (PEP 700) but no file of it is on the page"))
        except InvalidVersion:
            skipped.append(Skipped(v, "listed in 'versions' (PEP 700) but not a PEP 440 version"))
    releases = [
        Release(package, v, tuple(sorted(fs, key=lambda f: f.filename))) for v, fs in sorted(files.items())
    ]
    return releases, skipped


def parse_project_page(
    body: bytes, content_type: str, page_url: str, package: str, index_url: str = ""
) -> PackageReleases:
    """The releases on one project page, from its body and Content-Type (JSON or HTML)."""
    canonical = canonicalize_name(package)
    media, _, params = content_type.partition(";")
    media = media.strip().lower()
    m = re.search(r"charset=\"?([A-Za-z0-9._-]+)", params)
    shown = redact_url(page_url)
    listed = None
    if media == JSON_TYPE:
        name, api, entries, listed = _parse_json(body, page_url, shown)
        if canonicalize_name(name) != canonical:
            raise MalformedResponse(f"{shown}: the page is project {name!r}, not {canonical!r}")
    elif media in HTML_TYPES:
        api, entries = _parse_html(body, page_url, m.group(1) if m else None, shown)
        if api == "html" and not any(not isinstance(_file_version(e, canonical), Skipped) for e in entries):
            # Neither PEP 629's meta tag nor one file of the project: a web page, not the Simple API.
            raise MalformedResponse(
                f"{shown}: not a Simple API project page (no pypi:repository-version meta and no "
                f"link to a {canonical} file)"
            )
    else:
        raise MalformedResponse(
            f"{shown}: not a Simple API project page (Content-Type {content_type or 'missing'!r}; "
            f"expected {JSON_TYPE} or text/html)"
        )
    releases, skipped = _group(canonical, entries, listed)
    return PackageReleases(canonical, redact_url(index_url), shown, api, releases, skipped, listed)
