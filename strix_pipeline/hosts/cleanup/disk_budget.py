"""The sizes of a run's pulls, read before anything is pulled or stopped (the check that counts them
is stop_checks.disk_budget, beside the disk's other checks).

Every image a run will pull (its engine image and the efficiency probe image, which the run would
otherwise pull implicitly once production is down) is sized from its manifest (registry/client.py
``image_size``: the layers' and the config's bytes, linux/amd64 of an index); the bytes the caches may
still take (compile-cache volumes up to their budget) are added, and ``min_free_disk_gb`` stays free
after all of it. Refusal names each image and its bytes, so the owner sees what to prune or postpone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from strix_pipeline.registry.client import RegistryClient
from strix_pipeline.registry.names import DOCKER_HUB_NAMES


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
