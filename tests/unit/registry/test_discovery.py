"""Discovery logic with an in-memory store and a scripted client (fast, no services), and the version
order."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support.infra import free_port

from strix_pipeline.config import ImageSource, StrixConfig
from strix_pipeline.records import ImageRecord
from strix_pipeline.registry.client import ImageDetails, RegistryClient, TagInfo
from strix_pipeline.registry.discovery import DiscoveryReport, refresh_images, version_sort_key
from strix_pipeline.registry.errors import MalformedResponse, NoPlatform, NotFound, RegistryUnavailable
from strix_pipeline.registry.tag_rules import literal_prefix, tag_prefixes, tag_selected
from strix_pipeline.registry.transport import RetryPolicy

T0 = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)


def make_config(images: dict[str, list[dict[str, Any]]]) -> StrixConfig:
    engines: dict[str, Any] = {
        "llamacpp": {"kind": "llamacpp", "images": []},
        "vllm": {"kind": "vllm", "images": []},
    }
    for name, sources in images.items():
        engines.setdefault(name, {"kind": "vllm"})["images"] = sources
    return StrixConfig.model_validate(
        {
            "hosts": {"strix-halo": {"kind": "local"}},
            "engines": engines,
            "models": {"m": {"model": "M", "family": "m", "quantization": "Q4_K_M", "source": "pypi:x"}},
            "profiles": {"quick": {}},
        }
    )


class MemoryStore:
    """The ImageStore protocol in memory, keyed like the warehouse table."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], ImageRecord] = {}
        self.errors: list[tuple[str, str, str, datetime]] = []
        self.writes = 0

    def upsert_images(self, images: list[ImageRecord]) -> None:
        for img in images:
            self.writes += 1
            key = (img.registry, img.repository, img.tag)
            old = self.rows.get(key)
            self.rows[key] = replace(
                img, first_seen=min(old.first_seen, img.first_seen) if old else img.first_seen
            )

    def known_images(self, engine: str | None = None) -> list[ImageRecord]:
        return [r for r in self.rows.values() if engine is None or r.engine == engine]

    def mark_images_gone(self, registry: str, repository: str, tags: list[str], at: datetime) -> None:
        for t in tags:
            key = (registry, repository, t)
            self.writes += 1
            self.rows[key] = replace(self.rows[key], gone=True, gone_since=self.rows[key].gone_since or at)

    def record_registry_error(self, registry: str, repository: str, error: str, at: datetime) -> None:
        self.errors.append((registry, repository, error, at))


class ScriptedClient:
    """Stands in for RegistryClient: a dict of tag -> digest, details per digest, optional failures."""

    def __init__(
        self, tags: dict[str, str], *, fail_on: dict[str, Exception] | None = None, hub: bool = False
    ):
        self.tags = tags
        self.fail_on = fail_on or {}
        self.hub_api = "http://hub" if hub else None
        self.calls: list[tuple[str, str]] = []
        self.index_without_amd64: set[str] = set()

    def __enter__(self) -> ScriptedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    @contextlib.contextmanager
    def deadline(self, seconds: float | None) -> Iterator[None]:
        yield

    def _maybe_fail(self, what: str) -> None:
        self.calls.append((what.split(":")[0], what.split(":", 1)[1] if ":" in what else ""))
        for key, exc in self.fail_on.items():
            if what.startswith(key):
                raise exc

    def hub_tags(self, repository: str, *, max_tags: int = 5000) -> tuple[list[TagInfo], bool]:
        self._maybe_fail("hub:")
        infos = [TagInfo(t, d, T0) for t, d in sorted(self.tags.items())]
        return infos[:max_tags], len(infos) <= max_tags

    def list_tags(
        self, repository: str, *, max_tags: int = 5000, prefix: str | None = None
    ) -> tuple[list[str], bool]:
        self._maybe_fail(f"list:{prefix or ''}")
        tags = sorted(t for t in self.tags if t.startswith(prefix or ""))
        return tags[:max_tags], len(tags) <= max_tags

    def head_digest(self, repository: str, reference: str) -> tuple[str, str]:
        self._maybe_fail(f"head:{reference}")
        if reference not in self.tags:
            raise NotFound("gone", registry="r", repository=repository)
        return self.tags[reference], "application/vnd.oci.image.manifest.v1+json"

    def image_details(self, repository: str, reference: str) -> ImageDetails:
        self._maybe_fail(f"details:{reference}")
        if reference in self.index_without_amd64:
            raise NoPlatform("r/x: idx: index has no linux/amd64 manifest (has linux/arm64)")
        return ImageDetails(
            digest=reference,
            manifest_digest=reference,
            media_type="application/vnd.oci.image.manifest.v1+json",
            created=T0 - timedelta(hours=1),
            labels={
                "org.opencontainers.image.version": f"ver-{reference[-4:]}",
                "org.opencontainers.image.revision": "r1",
            },
        )


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


SOURCE = {
    "registry": "ghcr.io",
    "repository": "ggml-org/llama.cpp",
    "include": [r"^server-rocm-b\d+$"],
    "exclude": [r"-b1$"],
    "floating": ["server-rocm"],
}


def run(
    store: MemoryStore, client: ScriptedClient, source: dict[str, Any] | None = None, **kw: Any
) -> DiscoveryReport:
    cfg = make_config({"llamacpp": [source or SOURCE]})
    return refresh_images(
        cfg, store, engines=["llamacpp"], client_factory=lambda s: client, now=kw.pop("now", T0), **kw
    )  # type: ignore[arg-type,return-value]


def names(records: list[ImageRecord]) -> list[str]:
    return sorted(r.tag for r in records)


def test_new_then_unchanged_then_moved_once_then_gone() -> None:
    store = MemoryStore()
    client = ScriptedClient(
        {
            "server-rocm-b1": digest(1),
            "server-rocm-b2": digest(2),
            "server-rocm-b3": digest(3),
            "server-rocm": digest(3),
            "server-vulkan-b3": digest(9),
        }
    )
    r1 = run(store, client)
    assert names(r1.new) == [
        "server-rocm",
        "server-rocm-b2",
        "server-rocm-b3",
    ]  # b1 excluded, vulkan not included
    assert r1.moved == r1.gone == r1.errors == [] and r1.unchanged == 0
    row = store.rows[("ghcr.io", "ggml-org/llama.cpp", "server-rocm")]
    assert (
        row.floating
        and row.version == "ver-0003"
        and row.revision == "r1"
        and row.created == T0 - timedelta(hours=1)
    )
    assert row.sort_key == version_sort_key("server-rocm", T0 - timedelta(hours=1))
    assert not store.rows[("ghcr.io", "ggml-org/llama.cpp", "server-rocm-b2")].floating

    client.calls.clear()
    r2 = run(store, client, now=T0 + timedelta(days=1))
    assert not r2.changed and r2.unchanged == 3
    # release tags are immutable: only the floating tag costs a HEAD, and no manifest GET at all
    assert [c for c in client.calls if c[0] == "head"] == [("head", "server-rocm")]
    assert not [c for c in client.calls if c[0] == "details"]
    assert store.rows[("ghcr.io", "ggml-org/llama.cpp", "server-rocm-b2")].last_seen == T0 + timedelta(days=1)

    client.tags["server-rocm"] = digest(4)
    r3 = run(store, client, now=T0 + timedelta(days=2))
    assert names(r3.moved) == ["server-rocm"] and r3.moved[0].digest == digest(4) and not r3.new
    assert r3.moved[0].first_seen == T0  # the tag's first sighting is kept
    r4 = run(store, client, now=T0 + timedelta(days=3))
    assert not r4.changed  # reported once

    del client.tags["server-rocm-b2"]
    r5 = run(store, client, now=T0 + timedelta(days=4))
    assert names(r5.gone) == ["server-rocm-b2"] and r5.gone[0].gone
    kept = store.rows[("ghcr.io", "ggml-org/llama.cpp", "server-rocm-b2")]
    assert (
        kept.gone and kept.gone_since == T0 + timedelta(days=4) and kept.digest == digest(2)
    )  # never deleted
    assert not run(store, client, now=T0 + timedelta(days=5)).gone

    client.tags["server-rocm-b2"] = digest(2)  # re-published: new again
    assert names(run(store, client, now=T0 + timedelta(days=6)).new) == ["server-rocm-b2"]
    assert not store.rows[("ghcr.io", "ggml-org/llama.cpp", "server-rocm-b2")].gone


@pytest.mark.parametrize(
    ("fail_on", "exc"),
    [
        ("list:", RegistryUnavailable("ghcr.io/x: 503 after 3 attempts")),
        ("head:server-rocm", RegistryUnavailable("ghcr.io/x: ReadTimeout after 3 attempts")),
        ("details:", MalformedResponse("ghcr.io/x: body is not JSON")),
        ("details:", ValueError("a bug in parsing")),
    ],
)
def test_a_failing_registry_leaves_known_images_untouched(fail_on: str, exc: Exception) -> None:
    store = MemoryStore()
    client = ScriptedClient({"server-rocm-b2": digest(2), "server-rocm": digest(2)})
    run(store, client)
    before = dict(store.rows)
    writes = store.writes
    client.tags = {"server-rocm-b3": digest(3), "server-rocm": digest(3)}  # moved, new and gone pending
    client.fail_on = {fail_on: exc}
    report = run(store, client, now=T0 + timedelta(days=1))
    assert not report.changed
    assert store.rows == before and store.writes == writes  # nothing half-written
    assert len(report.errors) == 1 and report.errors[0].repository == "ggml-org/llama.cpp"
    assert store.errors and store.errors[0][:2] == ("ghcr.io", "ggml-org/llama.cpp")
    assert str(exc) in report.errors[0].message


def test_hub_listing_checks_digests_of_release_tags_and_falls_back_when_hub_fails() -> None:
    store = MemoryStore()
    client = ScriptedClient({"server-rocm-b2": digest(2)}, hub=True)
    assert names(run(store, client).new) == ["server-rocm-b2"]
    assert not [c for c in client.calls if c[0] == "head"]  # the Hub API gave the digest
    client.tags["server-rocm-b2"] = digest(5)  # a release tag rebuilt in place: visible for free here
    assert names(run(store, client).moved) == ["server-rocm-b2"]
    client.fail_on = {"hub:": RegistryUnavailable("hub.docker.com unreachable")}
    client.tags["server-rocm-b3"] = digest(6)
    report = run(store, client)
    assert names(report.new) == ["server-rocm-b3"] and not report.errors
    assert ("list", "server-rocm") in client.calls  # only the tags the patterns can select


def test_anchored_patterns_list_only_their_prefixes() -> None:
    assert literal_prefix(r"^server-rocm-b\d+$") == "server-rocm-b"
    assert literal_prefix(r"^v\d+\.\d+") == "v"
    assert literal_prefix(r"^rocm\-7\.1") == "rocm-7.1"
    assert literal_prefix("^abc?") == "ab"
    assert (
        literal_prefix("rocm") is None and literal_prefix("^a|^b") is None and literal_prefix("^(x)") is None
    )
    src = ImageSource(
        registry="ghcr.io",
        repository="x",
        include=[r"^server-rocm-b\d+$", r"^server-vulkan-b\d+$"],
        floating=["server-rocm"],
    )
    assert tag_prefixes(src) == ["server-rocm", "server-vulkan-b"]
    assert tag_prefixes(ImageSource(registry="ghcr.io", repository="x", include=["rocm"])) is None
    store = MemoryStore()
    client = ScriptedClient(
        {"server-rocm-b5": digest(5), "server-vulkan-b5": digest(6), "full-b5": digest(7)}
    )
    report = run(store, client, source={**SOURCE, "include": src.include, "exclude": []})
    assert names(report.new) == ["server-rocm-b5", "server-vulkan-b5"]
    assert [c for c in client.calls if c[0] == "list"] == [
        ("list", "server-rocm"),
        ("list", "server-vulkan-b"),
    ]


def test_index_without_amd64_is_skipped_with_reason_not_stored() -> None:
    store = MemoryStore()
    client = ScriptedClient({"server-rocm-b7": digest(7), "server-rocm-b8": digest(8)})
    client.index_without_amd64.add(digest(8))
    report = run(store, client)
    assert names(report.new) == ["server-rocm-b7"]
    assert [(s.tag, "linux/arm64" in s.reason) for s in report.skipped] == [("server-rocm-b8", True)]
    assert ("ghcr.io", "ggml-org/llama.cpp", "server-rocm-b8") not in store.rows and not report.errors


def test_details_budget_spreads_manifest_gets_over_refreshes() -> None:
    store = MemoryStore()
    client = ScriptedClient({f"server-rocm-b{n}": digest(n) for n in range(10, 40)})
    r1 = run(store, client, details_budget=5)
    assert len(r1.new) == 30
    with_details = sorted(r.tag for r in store.rows.values() if r.labels is not None)
    assert with_details == [f"server-rocm-b{n}" for n in range(35, 40)]  # the newest first
    r2 = run(store, client, details_budget=5, now=T0 + timedelta(days=1))
    assert not r2.changed and r2.unchanged == 30
    assert sum(r.labels is not None for r in store.rows.values()) == 10


def test_incomplete_listing_marks_nothing_gone() -> None:
    store = MemoryStore()
    client = ScriptedClient({f"server-rocm-b{n}": digest(n) for n in range(10, 20)})
    run(store, client)
    report = run(store, client, source={**SOURCE, "max_tags": 4})
    assert not report.gone and not any(r.gone for r in store.rows.values())


def test_unreachable_registry_fails_fast_and_is_not_tried_again() -> None:
    port = free_port()
    sources = [
        {"registry": f"127.0.0.1:{port}", "repository": "a/one", "insecure": True},
        {"registry": f"127.0.0.1:{port}", "repository": "a/two", "insecure": True},
    ]
    made: list[str] = []

    def factory(source: ImageSource) -> RegistryClient:
        made.append(source.repository)
        return RegistryClient(source.registry, insecure=True, policy=RetryPolicy(attempts=2, backoff_s=0.01))

    store = MemoryStore()
    start = time.monotonic()
    report = refresh_images(make_config({"vllm": sources}), store, client_factory=factory, now=T0)
    assert time.monotonic() - start < 5
    assert made == ["a/one"]
    assert [e.repository for e in report.errors] == ["a/one", "a/two"] and "not tried" in report.errors[
        1
    ].message
    assert len(store.errors) == 2 and not store.rows


def test_unknown_engine_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="nope"):
        refresh_images(make_config({}), MemoryStore(), engines=["nope"])


def test_tag_selection() -> None:
    src = ImageSource(
        registry="docker.io",
        repository="lmsysorg/sglang",
        include=["rocm"],
        exclude=["mi35x"],
        floating=["latest"],
    )
    assert tag_selected(src, "v0.5.5.post3-rocm700-mi30x")
    assert not tag_selected(src, "v0.5.5.post3-rocm700-mi35x")
    assert not tag_selected(src, "v0.5.5-cu126")
    assert tag_selected(src, "latest")


def test_version_sort_key_orders_each_family() -> None:
    def order(tags: list[str], created: datetime | None = None) -> list[str]:
        return sorted(tags, key=lambda t: version_sort_key(t, created))

    assert order(["v0.10.2", "v0.9.0", "v0.10.1.1", "v0.10.2rc1", "v0.10.1", "v0.11.0"]) == [
        "v0.9.0",
        "v0.10.1",
        "v0.10.1.1",
        "v0.10.2rc1",
        "v0.10.2",
        "v0.11.0",
    ]
    assert order(["v0.5.5.post3-rocm700-mi30x", "v0.5.5-rocm700-mi30x", "v0.5.4.post1-rocm630"]) == [
        "v0.5.4.post1-rocm630",
        "v0.5.5-rocm700-mi30x",
        "v0.5.5.post3-rocm700-mi30x",
    ]
    assert order(["server-rocm-b6500", "server-rocm-b700", "server-rocm-b10000"]) == [
        "server-rocm-b700",
        "server-rocm-b6500",
        "server-rocm-b10000",
    ]
    assert order(["gfx1151-20260115", "gfx1151-20251103", "2026.02.01"]) == [
        "gfx1151-20251103",
        "gfx1151-20260115",
        "2026.02.01",
    ]
    early, late = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)
    assert version_sort_key("latest", early) < version_sort_key("latest", late)
    assert version_sort_key("latest", None) == "0|latest"
    # families: release version > build number > date/created
    assert (
        version_sort_key("v0.1.0", None)
        > version_sort_key("b9999", None)
        > version_sort_key("20991231", None)
    )
