"""Which releases lie between a change's brackets: the ones a bisection searches.

The releases of the brackets' source strictly between them in version order (the engine's image
versions the refresh found: the package index's releases on host `local`, a registry's tags such as
llama.cpp's `server-rocm-b<N>` on a Box), in one tag family; floating tags have no order and are left
out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from strix_pipeline.planning.targets import partition_key
from strix_pipeline.records import ImageRecord


@dataclass(frozen=True)
class Candidate:
    version: str
    key: str  # the partition of benchmark_run that benchmarks it
    digest: str


def _label(image: ImageRecord) -> str:
    return image.version or image.tag


def tag_family(tag: str) -> str:
    """What a tag is a release *of*: ``server-rocm-b6500`` -> ``server-rocm-b``, ``v0.11.0`` -> ``v``.
    One repository may publish several builds side by side (ROCm, Vulkan): a bisection stays in one."""
    return re.sub(r"\d[\w.+-]*$", "", tag)


def releases_between(
    images: list[ImageRecord], first: ImageRecord, last: ImageRecord, measured: set[str]
) -> list[Candidate]:
    """The releases of the brackets' source strictly between them in version order, never benchmarked
    in the series (``measured``: its version labels): the same registry, repository and tag family
    (llama.cpp's ``server-rocm-b<N>`` stays among ROCm builds). Floating tags and gone ones are left out."""
    family = tag_family(first.tag)
    same = [
        i
        for i in images
        if i.engine == first.engine
        and i.registry == first.registry
        and i.repository == first.repository
        and tag_family(i.tag) == family
        and not i.gone
        and not i.floating
        and first.sort_key < i.sort_key < last.sort_key
        and _label(i) not in measured
    ]
    unique = {i.digest: i for i in sorted(same, key=lambda i: (i.sort_key, i.last_seen))}
    ordered = sorted(unique.values(), key=lambda i: i.sort_key)
    return [Candidate(_label(i), partition_key(i.engine, i), i.digest) for i in ordered]
