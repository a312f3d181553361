"""The canary: one pinned build benchmarked every week on a host, so that a step in its figures over time
is the host's. Planning schedules it; the analysis reads its series over time (analysis/canary.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Canary:
    """The pinned build on one host: its engine and its release (a tag, e.g. ``b11434``)."""

    host: str
    engine: str
    version: str

    def names(self, version: str) -> bool:
        """A series point's version label is this release (a floating tag's label adds ``@digest``)."""
        return version == self.version or version.startswith(f"{self.version}@")

    def __str__(self) -> str:
        return f"{self.engine} {self.version}"
