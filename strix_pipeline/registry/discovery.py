r"""Engine image discovery: what each configured repository holds now, against what the warehouse knew.

One refresh per engine and image source lists the tags (OCI tag grammar first, then the include and
exclude patterns), gets the digests it does not know, classifies each tag new, moved or gone, and
reads labels for new digests within a budget. Nothing is written for a repository until all of its
requests succeeded; a failure is recorded with its registry and repository, never a crash.
The rules in full: docs/registry.md ("Image discovery"; version order: "Version order").
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from packaging.utils import canonicalize_name

from strix_pipeline.config import ImageSource, StrixConfig
from strix_pipeline.records import LOCAL_REGISTRY, ImageRecord
from strix_pipeline.registry.client import ImageDetails, RegistryClient, TagInfo
from strix_pipeline.registry.errors import NoPlatform, NotFound, RegistryError, RegistryUnavailable
from strix_pipeline.registry.index_discovery import (
    INDEX_PACKAGES,
    IndexFactory,
    IndexOutcome,
    classify_releases,
    default_index,
)
from strix_pipeline.registry.tag_rules import tag_prefixes, tag_selected, valid_tag
from strix_pipeline.registry.transport import RetryPolicy
from strix_pipeline.registry.versions import version_sort_key

__all__ = [
    "DiscoveryReport",
    "ImageStore",
    "RegistryFailure",
    "SkippedTag",
    "default_client",
    "refresh_images",
    "version_sort_key",
]

REPOSITORY_BUDGET_S = 120.0  # wall clock for one repository, retries and Retry-After waits included
DETAILS_BUDGET = 25  # manifest+config GETs per repository and refresh (pull-limited on Docker Hub)


class ImageStore(Protocol):
    """What discovery needs from the warehouse (strix_pipeline.warehouse.Warehouse has it)."""

    def upsert_images(self, images: list[ImageRecord]) -> None: ...

    def known_images(self, engine: str | None = None) -> list[ImageRecord]: ...

    def mark_images_gone(self, registry: str, repository: str, tags: list[str], at: datetime) -> None: ...

    def record_registry_error(self, registry: str, repository: str, error: str, at: datetime) -> None: ...


@dataclass
class RegistryFailure:
    engine: str
    registry: str
    repository: str
    message: str
    # what kind of failure: the client's exception class (RateLimited, RegistryUnavailable,
    # MalformedResponse, AuthError, NotFound, ...), or the unexpected exception's
    error_class: str = "RegistryError"

    @property
    def recorded(self) -> str:
        """The text stored in ``registry_errors.error``: the class first, so it can be grouped by."""
        return f"{self.error_class}: {self.message}"


@dataclass
class SkippedTag:
    engine: str
    registry: str
    repository: str
    tag: str
    digest: str | None
    reason: str


@dataclass
class DiscoveryReport:
    new: list[ImageRecord] = field(default_factory=list)
    moved: list[ImageRecord] = field(default_factory=list)  # floating tags now at a new digest
    gone: list[ImageRecord] = field(default_factory=list)  # as known before, now marked gone
    unchanged: int = 0
    errors: list[RegistryFailure] = field(default_factory=list)
    skipped: list[SkippedTag] = field(default_factory=list)
    repositories: int = 0  # image sources looked at

    @property
    def changed(self) -> bool:
        return bool(self.new or self.moved or self.gone)

    def to_dict(self) -> dict[str, Any]:
        def rec(r: ImageRecord) -> dict[str, Any]:
            return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(r).items()}

        return {
            "new": [rec(r) for r in self.new],
            "moved": [rec(r) for r in self.moved],
            "gone": [rec(r) for r in self.gone],
            "unchanged": self.unchanged,
            "errors": [asdict(e) for e in self.errors],
            "skipped": [asdict(s) for s in self.skipped],
            "repositories": self.repositories,
        }


ClientFactory = Callable[[ImageSource], RegistryClient]


def default_client(source: ImageSource, policy: RetryPolicy | None = None) -> RegistryClient:
    """A client for one image source; credentials come from the environment variables it names."""
    username = os.environ.get(source.username_env) if source.username_env else None
    password = os.environ.get(source.password_env) if source.password_env else None
    return RegistryClient(
        source.registry,
        insecure=source.insecure,
        username=username,
        password=password,
        policy=policy or RetryPolicy(attempts=3, backoff_s=0.5, backoff_max_s=4.0, connect_timeout_s=3.0),
    )


# Digests of indexes without linux/amd64, so a long-lived process (the sensor) does not GET them again.
_SKIP_CACHE: dict[str, str] = {}
_SKIP_CACHE_MAX = 4096


@dataclass
class _Outcome:
    upserts: list[ImageRecord] = field(default_factory=list)
    new: list[ImageRecord] = field(default_factory=list)
    moved: list[ImageRecord] = field(default_factory=list)
    gone: list[ImageRecord] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[SkippedTag] = field(default_factory=list)


def _record(
    engine: str,
    source: ImageSource,
    tag: str,
    digest: str,
    details: ImageDetails | None,
    info: TagInfo,
    now: datetime,
    first_seen: datetime,
) -> ImageRecord:
    created = details.created if details else None
    return ImageRecord(
        engine=engine,
        registry=source.registry,
        repository=source.repository,
        tag=tag,
        digest=digest,
        floating=tag in source.floating,
        created=created,
        version=(details.version if details else None) or tag,
        revision=details.revision if details else None,
        labels=json.dumps(details.labels, sort_keys=True) if details else None,
        sort_key=version_sort_key(tag, created or info.last_updated),
        first_seen=first_seen,
        last_seen=now,
    )


def _refresh_source(
    engine: str,
    source: ImageSource,
    client: RegistryClient,
    known: dict[str, ImageRecord],
    now: datetime,
    details_budget: int,
) -> _Outcome:
    out = _Outcome()
    repo = source.repository
    infos: list[TagInfo] | None = None
    complete = False
    if client.hub_api:
        try:
            infos, complete = client.hub_tags(repo, max_tags=source.max_tags)
        except RegistryError:
            infos = None  # the Hub API is a convenience: the registry API below is the authority
    if infos is None:
        prefixes = tag_prefixes(source)
        if prefixes is None:
            tags, complete = client.list_tags(repo, max_tags=source.max_tags)
        else:
            tags, complete = [], True
            for prefix in prefixes:
                part, part_complete = client.list_tags(repo, max_tags=source.max_tags, prefix=prefix)
                tags += part
                complete = complete and part_complete
        infos = [TagInfo(t) for t in dict.fromkeys(tags)]
    listed = {i.name for i in infos}
    for info in infos:
        if not valid_tag(info.name):
            out.skipped.append(
                SkippedTag(
                    engine,
                    source.registry,
                    repo,
                    info.name,
                    info.digest,
                    f"not a valid tag name {info.name!r} (the OCI grammar is "
                    f"[a-zA-Z0-9_][a-zA-Z0-9._-]{{0,127}})",
                )
            )
    selected = [i for i in infos if tag_selected(source, i.name)]
    # Newest first, so the details budget goes to what a benchmark would pick.
    selected.sort(key=lambda i: version_sort_key(i.name, i.last_updated), reverse=True)

    vanished: list[str] = []
    pending: list[tuple[TagInfo, str, ImageRecord | None]] = []  # (tag, digest, known) needing details
    for info in selected:
        k = known.get(info.name)
        live = k is not None and not k.gone
        floating = info.name in source.floating
        if live and not floating and info.digest is None:
            out.unchanged += 1  # a release tag is immutable: no request spent on it
            assert k is not None
            if k.labels is None:
                pending.append((info, k.digest, k))
            else:
                out.upserts.append(_touch(k, now))
            continue
        if info.platforms is not None and "linux/amd64" not in info.platforms:
            out.skipped.append(
                SkippedTag(
                    engine,
                    source.registry,
                    repo,
                    info.name,
                    info.digest,
                    f"no linux/amd64 image ({', '.join(info.platforms)})",
                )
            )
            continue
        if info.digest:
            digest = info.digest
        else:
            try:
                digest, _ = client.head_digest(repo, info.name)
            except NotFound:
                vanished.append(info.name)  # deleted between the listing and the HEAD
                continue
        if live and k is not None and k.digest == digest:
            out.unchanged += 1
            if k.labels is None:
                pending.append((info, digest, k))
            else:
                out.upserts.append(_touch(k, now))
            continue
        pending.append((info, digest, k))

    # Details: moved first (they are the news), then new, then backfills; newest first within each.
    def rank(item: tuple[TagInfo, str, ImageRecord | None]) -> int:
        info, digest, k = item
        if k is not None and not k.gone and k.digest != digest:
            return 0
        return 1 if k is None or k.gone else 2

    pending.sort(key=rank)
    budget = details_budget
    for info, digest, k in pending:
        kind = rank((info, digest, k))
        details: ImageDetails | None = None
        if digest in _SKIP_CACHE:
            out.skipped.append(
                SkippedTag(engine, source.registry, repo, info.name, digest, _SKIP_CACHE[digest])
            )
            continue
        if kind == 0 or budget > 0:
            budget -= 1
            try:
                details = client.image_details(repo, digest)
            except NoPlatform as e:
                reason = str(e).split(": ", 1)[-1]
                if len(_SKIP_CACHE) < _SKIP_CACHE_MAX:
                    _SKIP_CACHE[digest] = reason
                out.skipped.append(SkippedTag(engine, source.registry, repo, info.name, digest, reason))
                continue
            except NotFound:
                vanished.append(info.name)
                continue
        if kind == 2:
            assert k is not None
            rec = (
                _record(engine, source, info.name, digest, details, info, now, k.first_seen)
                if details
                else _touch(k, now)
            )
            out.upserts.append(rec)
            continue
        first_seen = k.first_seen if kind == 0 and k is not None else now
        rec = _record(engine, source, info.name, digest, details, info, now, first_seen)
        out.upserts.append(rec)
        (out.moved if kind == 0 else out.new).append(rec)

    if complete:
        vanished += [
            t for t, k in known.items() if not k.gone and t not in listed and tag_selected(source, t)
        ]
    seen_gone: set[str] = set()
    for t in vanished:
        k = known.get(t)
        if k is not None and not k.gone and t not in seen_gone:
            seen_gone.add(t)
            out.gone.append(ImageRecord(**{**asdict(k), "gone": True, "gone_since": now}))
    return out


def _touch(k: ImageRecord, now: datetime) -> ImageRecord:
    return ImageRecord(**{**asdict(k), "last_seen": now, "gone": False, "gone_since": None})


def refresh_images(
    config: StrixConfig,
    store: ImageStore,
    *,
    engines: list[str] | None = None,
    client_factory: ClientFactory | None = None,
    now: datetime | None = None,
    repository_budget_s: float = REPOSITORY_BUDGET_S,
    details_budget: int = DETAILS_BUDGET,
    index_factory: IndexFactory | None = None,
) -> DiscoveryReport:
    """Refresh every image source of ``engines`` (default: all) and store what changed.

    Registry failures never raise: they are recorded in the store and returned in ``report.errors``.
    An unknown engine name raises ``ValueError`` (a caller's mistake, not a registry's)."""
    now = now or datetime.now(UTC)
    names = list(engines) if engines else list(config.engines)
    unknown = [n for n in names if n not in config.engines]
    if unknown:
        raise ValueError(
            f"no engine named {', '.join(map(repr, unknown))}; configured: {', '.join(config.engines)}"
        )
    factory = client_factory or default_client
    report = DiscoveryReport()
    unreachable: dict[str, str] = {}  # registry -> why, for the rest of this refresh
    for name in names:
        engine = config.engines[name]
        known_all = store.known_images(name)
        for source in engine.images:
            report.repositories += 1
            known = {
                k.tag: k
                for k in known_all
                if k.registry == source.registry and k.repository == source.repository
            }
            if source.registry == LOCAL_REGISTRY:  # host local's releases: the package index
                _refresh_index(report, store, name, engine.kind, source, known, now, index_factory)
                continue
            if source.registry in unreachable:
                why = f"not tried: {unreachable[source.registry]}"
                _fail(
                    report,
                    store,
                    RegistryFailure(name, source.registry, source.repository, why, "RegistryUnavailable"),
                    now,
                )
                continue
            try:
                with factory(source) as client, client.deadline(repository_budget_s):
                    outcome = _refresh_source(name, source, client, known, now, details_budget)
            except RegistryError as e:
                if isinstance(e, RegistryUnavailable) and e.unreachable:
                    unreachable[source.registry] = f"{source.registry} unreachable earlier in this refresh"
                _fail(
                    report,
                    store,
                    RegistryFailure(name, source.registry, source.repository, str(e), type(e).__name__),
                    now,
                )
                continue
            except Exception as e:  # noqa: BLE001 - a bug or an unforeseen body must not cost the other repositories
                why = f"unexpected {type(e).__name__}: {e}"
                _fail(
                    report,
                    store,
                    RegistryFailure(name, source.registry, source.repository, why, type(e).__name__),
                    now,
                )
                continue
            _take(report, store, source, outcome, outcome.skipped, now)
    return report


def _refresh_index(
    report: DiscoveryReport,
    store: ImageStore,
    engine: str,
    kind: str,
    source: ImageSource,
    known: dict[str, ImageRecord],
    now: datetime,
    index_factory: IndexFactory | None,
) -> None:
    """One local image source: its package's releases on the index (index_discovery.py)."""
    index_name = "package index"
    package = INDEX_PACKAGES.get(kind)
    if package is None or canonicalize_name(source.repository) != package:
        why = (
            f"registry 'local' holds the releases of {', '.join(INDEX_PACKAGES.values())}; "
            f"engine kind {kind} has none named {source.repository!r}"
        )
        _fail(
            report, store, RegistryFailure(engine, source.registry, source.repository, why, "NotFound"), now
        )
        return
    try:
        with (index_factory or default_index)() as idx:
            index_name = idx.setting.display
            releases = idx.releases(package)
        outcome = classify_releases(engine, kind, releases, known, now, lambda t: tag_selected(source, t))
    except RegistryError as e:
        _fail(
            report,
            store,
            RegistryFailure(
                engine, source.registry, source.repository, f"{index_name}: {e}", type(e).__name__
            ),
            now,
        )
        return
    except Exception as e:  # noqa: BLE001 - an unforeseen page must not cost the other repositories
        why = f"{index_name}: unexpected {type(e).__name__}: {e}"
        _fail(
            report,
            store,
            RegistryFailure(engine, source.registry, source.repository, why, type(e).__name__),
            now,
        )
        return
    skipped = [
        SkippedTag(engine, source.registry, source.repository, v, None, why) for v, why in outcome.skipped
    ]
    _take(report, store, source, outcome, skipped, now)


def _take(
    report: DiscoveryReport,
    store: ImageStore,
    source: ImageSource,
    outcome: _Outcome | IndexOutcome,
    skipped: list[SkippedTag],
    now: datetime,
) -> None:
    """Store one source's outcome (a registry's tags or an index's releases) and add it to the report."""
    store.upsert_images(outcome.upserts)
    if outcome.gone:
        store.mark_images_gone(source.registry, source.repository, [g.tag for g in outcome.gone], now)
    report.new += outcome.new
    report.moved += outcome.moved
    report.gone += outcome.gone
    report.unchanged += outcome.unchanged
    report.skipped += skipped


def _fail(report: DiscoveryReport, store: ImageStore, failure: RegistryFailure, now: datetime) -> None:
    report.errors.append(failure)
    store.record_registry_error(failure.registry, failure.repository, failure.recorded, now)
