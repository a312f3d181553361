"""The disk a night's pulls need, counted before anything is pulled or stopped.

Every image a run will pull (its engine image and the efficiency probe image, which the run would
otherwise pull implicitly once production is down) is sized from its manifest (registry/client.py
``image_size``: the layers' and the config's bytes, linux/amd64 of an index); the bytes the caches may
still take (compile-cache volumes up to their budget) are added, and ``min_free_disk_gb`` stays free
after all of it. Refusal names each image and its bytes, so the owner sees what to prune or postpone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from strix_pipeline.hosts.stop_checks import DISK, Finding
from strix_pipeline.registry.client import RegistryClient
from strix_pipeline.registry.names import DOCKER_HUB_NAMES
from strix_pipeline.units import GB


@dataclass(frozen=True)
class Pull:
    image: str  # the reference as docker pull is given it
    bytes: int  # from its manifest


def split_reference(ref: str) -> tuple[str, str, str]:
    """``[registry/]repository[:tag][@digest]`` -> (registry, repository, tag or digest), as Docker
    reads a name: a first part with a '.' or ':' or ``localhost`` is a registry, else Docker Hub."""
    if not ref or any(c.isspace() for c in ref):
        raise ValueError(f"not an image reference: {ref!r}")
    name, at, digest = ref.partition("@")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, name = first, rest
    else:
        registry = DOCKER_HUB_NAMES[0]
    head, colon, tag = name.rpartition(":")
    if colon and "/" not in tag:
        name = head
    else:
        tag = "latest"
    if not name:
        raise ValueError(f"not an image reference: {ref!r}")
    return registry, name, digest if at else tag


def pull_sizes(refs: list[str], client_for: Callable[[str], RegistryClient]) -> list[Pull]:
    """Each of ``refs`` (duplicates once) sized from its manifest; ``client_for(registry)`` gives the
    registry's client. A manifest that cannot be read raises the registry's error: an image whose size
    is unknown is never pulled on a guess."""
    out: list[Pull] = []
    for ref in dict.fromkeys(refs):
        registry, repository, reference = split_reference(ref)
        with client_for(registry) as client:
            out.append(Pull(ref, client.image_size(repository, reference).total_bytes))
    return out


def disk_budget(free_bytes: int, pulls: list[Pull], *, cache_bytes: int, min_free_bytes: int) -> Finding:
    """Whether ``free_bytes`` hold every pull and ``cache_bytes`` with ``min_free_bytes`` left over."""
    need = sum(p.bytes for p in pulls) + cache_bytes + min_free_bytes
    images = ", ".join(f"{p.image} {p.bytes:,} bytes ({p.bytes / GB:.2f} GB)" for p in pulls) or "no image"
    detail = (
        f"{free_bytes:,} bytes ({free_bytes / GB:.2f} GB) free; needs {need:,} bytes "
        f"({need / GB:.2f} GB): pulls {images}; caches {cache_bytes:,} bytes; "
        f"min free {min_free_bytes:,} bytes"
    )
    if free_bytes < need:
        return Finding(
            DISK, False, f"short by {need - free_bytes:,} bytes: {detail}",
            "prune unused images and compile caches (strix prune budget), or grow the disk",
        )  # fmt: skip
    return Finding(DISK, True, detail)
