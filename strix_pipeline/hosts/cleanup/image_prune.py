"""Engine images no series still needs, removed from a Docker host: floating digests of tens of GB
otherwise pile up on the Box's disk, one per week.

Only images of the configured image sources are touched, and of those never one that a container
uses (production's, whatever its state) or whose digest is kept (what the schedule benchmarks now,
the canary, the run's own image). Removal is Docker's own (no force): a layer another image shares
stays.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from strix_pipeline.config import StrixConfig
from strix_pipeline.registry.names import normalize_repository, pull_reference

log = logging.getLogger(__name__)


@dataclass
class Pruned:
    removed: list[str] = field(default_factory=list)  # repository@digest of each image removed
    freed_bytes: int = 0
    kept_in_use: list[str] = field(default_factory=list)  # tracked images a container still uses

    def describe(self) -> str:
        if not self.removed:
            return "no image to prune"
        return (
            f"pruned {len(self.removed)} image(s) no series needs, {self.freed_bytes / 1e9:.1f} GB: "
            + ", ".join(self.removed)
        )


def tracked_names(config: StrixConfig) -> set[str]:
    """The names Docker gives the images of every configured source (as a pull by digest names them)."""
    return {
        normalize_repository(pull_reference(s.registry, s.repository, "sha256:0").split("@", 1)[0])
        for e in config.engines.values()
        for s in e.images
    }


def prune_images(client: Any, tracked: set[str], keep_digests: set[str]) -> Pruned:
    """Remove the images of ``tracked`` names that no container uses and no kept digest names."""
    out = Pruned()
    in_use = {c.attrs.get("Image") for c in client.containers.list(all=True)}
    for image in client.images.list():
        attrs = image.attrs or {}
        refs = list(attrs.get("RepoDigests") or [])
        names = {normalize_repository(r.split("@", 1)[0]) for r in refs}
        names |= {normalize_repository(t.rsplit(":", 1)[0]) for t in image.tags or []}
        if not names & tracked:
            continue
        digests = {r.split("@", 1)[1] for r in refs if "@" in r}
        label = refs[0] if refs else image.id[:19]
        if image.id in in_use:
            out.kept_in_use.append(label)
            continue
        if digests & keep_digests:
            continue
        try:
            client.images.remove(image.id, force=False)
        except Exception as e:  # noqa: BLE001 - in use by a container started meanwhile, or gone: kept
            log.warning("could not prune %s: %s", label, e)
            continue
        out.removed.append(label)
        out.freed_bytes += int(attrs.get("Size") or 0)
    return out
