"""The compile-cache volumes on a Docker host, held to a budget.

Each engine image whose engine compiles at start gets a named volume (``DockerLauncher``'s
``compile_cache_volume``: one per image digest), reused by every later start of that image. A new
image every week leaves last week's volume behind; nothing removed them. Before a run's disk check the
volumes are held to ``compile_cache_budget_gb``: the oldest first, never one a planned run needs (its
image's digest is kept) and never one a container still uses. What the budget still allows the caches
to grow by is counted in the disk check (hosts/cleanup/disk_budget.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strix_pipeline.hosts.docker.names import safe_name
from strix_pipeline.units import GB

log = logging.getLogger(__name__)

PREFIX = "strix-compile-cache-"


def _short(digest: str) -> str:
    return digest.rsplit("@", 1)[-1].removeprefix("sha256:")[:16]


def volume_name(kind: str, digest: str) -> str:
    """The compile-cache volume of one image of engine ``kind`` (the one spelling the launcher uses)."""
    return safe_name(f"{PREFIX}{kind}-{_short(digest)}")[:63]


def of_digests(digests: set[str]) -> Callable[[str], bool]:
    """Whether a compile-cache volume is one of these images' (whatever engine compiled into it)."""
    shorts = {_short(d) for d in digests if d}
    return lambda name: name.startswith(PREFIX) and name.rsplit("-", 1)[-1] in shorts


@dataclass(frozen=True)
class CacheVolume:
    name: str
    bytes: int  # as Docker counts it (`docker system df -v`); 0 when it has not
    in_use: bool  # a container (running or not) mounts it
    created: str  # Docker's CreatedAt: ISO text, so it sorts oldest first


@dataclass
class CachePrune:
    """What holding the caches to their budget did, and what they may still take."""

    budget_bytes: int
    removed: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    total_bytes: int = 0  # the volumes' bytes after the prune
    over_kept: list[str] = field(default_factory=list)  # over budget, but needed or in use: kept

    @property
    def allowance_bytes(self) -> int:
        """How much the caches may still grow: the budget left (the disk check counts it)."""
        return max(0, self.budget_bytes - self.total_bytes)

    def describe(self) -> str:
        head = f"compile caches {self.total_bytes / GB:.2f} GB of their {self.budget_bytes / GB:g} GB budget"
        if self.removed:
            head += (
                f"; removed {len(self.removed)} no planned run needs ({self.freed_bytes / GB:.2f} GB): "
                + ", ".join(self.removed)
            )
        if self.over_kept:
            head += "; over budget but kept (needed or in use): " + ", ".join(self.over_kept)
        return head


def cache_volumes(client: Any) -> list[CacheVolume]:
    """The compile-cache volumes on the host with their sizes (Docker's disk usage report)."""
    report = client.df() or {}
    in_use = {
        m.get("Name")
        for c in client.containers.list(all=True)
        for m in ((c.attrs or {}).get("Mounts") or [])
        if m.get("Type") == "volume"
    }
    out = []
    for v in report.get("Volumes") or []:
        name = v.get("Name") or ""
        if not name.startswith(PREFIX):
            continue
        usage = v.get("UsageData") or {}
        size = int(usage.get("Size") or 0)
        refs = int(usage.get("RefCount") or 0)
        out.append(CacheVolume(name, max(0, size), name in in_use or refs > 0, str(v.get("CreatedAt") or "")))
    return out


def hold_to_budget(client: Any, budget_bytes: int, keep: Callable[[str], bool]) -> CachePrune:
    """Remove the oldest compile-cache volumes ``keep`` does not name and no container uses until the
    rest fit ``budget_bytes``; a volume Docker refuses to remove (in use meanwhile) is kept and said."""
    volumes = sorted(cache_volumes(client), key=lambda v: v.created)
    out = CachePrune(budget_bytes, total_bytes=sum(v.bytes for v in volumes))
    for v in volumes:
        if out.total_bytes <= budget_bytes:
            break
        if keep(v.name) or v.in_use:
            out.over_kept.append(v.name)
            continue
        try:
            client.volumes.get(v.name).remove()
        except Exception as e:  # noqa: BLE001 - mounted by a container started meanwhile: kept
            log.warning("compile cache %s not removed: %s", v.name, e)
            out.over_kept.append(v.name)
            continue
        out.removed.append(v.name)
        out.freed_bytes += v.bytes
        out.total_bytes -= v.bytes
    return out
