"""The decision's baseline run as production deploys it: a :class:`BenchmarkTarget` of the baseline
engine on the Box whose image is production's (same digest) and whose command, environment and model
file are production's (planning/production_baseline.py). A production that runs a binary gives the
matching engine build: the image the pipeline knows of the same llama.cpp build (``b<N>`` in its tag or
version) and backend family (a Vulkan binary: a Vulkan image). The configured ``[decision]
baseline_image`` / ``baseline_model`` stay an explicit override: :func:`baseline_choice` says which one
a decision used."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from strix_pipeline.config import StrixConfig
from strix_pipeline.fingerprint import backend_family
from strix_pipeline.planning.production_baseline import (
    PRODUCTION_AS_DEPLOYED,
    ProductionBaseline,
    ProductionReadError,
)
from strix_pipeline.planning.targets import BenchmarkTarget
from strix_pipeline.records import ImageRecord
from strix_pipeline.registry.names import DOCKER_HUB_NAMES

AS_DEPLOYED_TAG = "as-deployed"
_BUILD = re.compile(r"(?:^|[-_.:])b(\d+)(?=$|[-_.])")


def build_of(image: ImageRecord) -> str | None:
    """The llama.cpp build (``b6123``) an image's tag or version names (``server-vulkan-b6123``)."""
    for text in (image.tag, image.version):
        if m := _BUILD.search(text or ""):
            return f"b{int(m.group(1))}"
    return None


def is_matching_build(image: ImageRecord, baseline: ProductionBaseline) -> bool:
    """``image`` is the engine build of production's binary: the same llama.cpp build and backend
    family (a binary of no named backend: an image that names none either)."""
    family = baseline.backend if baseline.backend in ("rocm", "vulkan") else None
    return (
        baseline.build is not None
        and build_of(image) == baseline.build
        and backend_family(image.repository, image.tag) == family
    )


def matching_build(
    images: Sequence[ImageRecord], engine: str, baseline: ProductionBaseline
) -> ImageRecord | None:
    """The newest-seen image of ``engine`` that is production's binary's engine build, if known."""
    found = [i for i in images if i.engine == engine and not i.gone and is_matching_build(i, baseline)]
    return max(found, key=lambda i: i.last_seen) if found else None


def split_digest_ref(ref: str) -> tuple[str, str, str]:
    """(registry, repository, digest) of ``[registry/]repository@sha256:…`` (Docker Hub when the first
    part names no registry: no dot, no port, not localhost)."""
    if "@" not in ref:
        raise ProductionReadError(
            f"production's image {ref} has no repository digest (built on the Box, never pushed): "
            "the baseline cannot pull the same image by digest"
        )
    name, digest = ref.split("@", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest, digest
    return DOCKER_HUB_NAMES[0], name, digest


def production_target(
    config: StrixConfig,
    host: str,
    baseline: ProductionBaseline,
    *,
    now: datetime | None = None,
    images: Sequence[ImageRecord] = (),
) -> BenchmarkTarget:
    """The baseline run of ``host``: the decision's baseline engine, the model profile the decision names
    (else the host's first run of that engine: its family and reserve; the file is production's), the
    profile that run uses, and production's image -- or, when production runs a binary, the matching
    engine build among ``images`` (the pipeline's known images)."""
    engine = config.decision.baseline_engine
    runs = [r for r in config.runs.get(host, []) if r.engine == engine]
    if not runs:
        raise ProductionReadError(f"host {host} runs no {engine}: no profile for the baseline run")
    run = next((r for r in runs if r.model == config.decision.baseline_model), runs[0])
    if baseline.image_ref is None:
        if baseline.build is None:
            raise ProductionReadError(
                "production runs a binary whose llama.cpp build its --version does not say: "
                "no engine build to match"
            )
        found = matching_build(images, engine, baseline)
        if found is None:
            raise ProductionReadError(
                f"production runs a binary of llama.cpp {baseline.build} ({baseline.backend}): no known "
                f"{engine} image of that build and backend"
            )
        return BenchmarkTarget(host, engine, run.model, run.profile, found, production=baseline)
    registry, repository, digest = split_digest_ref(baseline.image_ref)
    # a run's backend family is read from its tag and repository (fingerprint.backend_family): one that
    # names none gets production's, read from its flags, environment or devices, so a Vulkan production
    # pairs as Vulkan
    tag = baseline.image_tag or AS_DEPLOYED_TAG
    if backend_family(repository, tag) is None and baseline.backend in ("rocm", "vulkan"):
        tag = f"{tag}-{AS_DEPLOYED_TAG}-{baseline.backend}"
    now = now or datetime.now(UTC)
    image = ImageRecord(
        engine=engine,
        registry=registry,
        repository=repository,
        tag=tag,
        digest=digest,
        floating=False,
        created=None,
        version=None,
        revision=None,
        labels=None,
        sort_key=tag,
        first_seen=now,
        last_seen=now,
    )
    return BenchmarkTarget(host, engine, run.model, run.profile, image, production=baseline)


def baseline_choice(config: StrixConfig) -> str:
    """Which baseline a decision compares with: the configured override when ``[decision]`` names an
    image or a model profile, else production as deployed."""
    d = config.decision
    named = [
        f"image {d.baseline_image}" if d.baseline_image else "",
        f"model {d.baseline_model}" if d.baseline_model else "",
    ]
    named = [n for n in named if n]
    if named:
        return f"the configured baseline ({', '.join(named)}: an explicit override)"
    return PRODUCTION_AS_DEPLOYED
