"""Which releases a history benchmarks: N spread over the package index's history, or the ones named.

`strix history` follows an engine back in time on host `local`: its releases on the package index
(registry/index_discovery.py) are image versions like any other, and a history is a set of their
partitions run through Dagster. The choice is made here, from the releases alone, so the CLI, `make
history` and the tests choose alike: the newest release always, the oldest of the window when two or
more are asked for, the rest evenly spaced by position in between (positions, not dates: releases
come in bursts, and a burst should not take every slot).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from strix_pipeline.records import ImageRecord


class HistoryError(ValueError):
    """A history that cannot be chosen: the message names the engine, the version or the window."""


@dataclass(frozen=True)
class VersionChoice:
    """``--versions``: a count (``4``) or the releases by name (``b10333,b11434``; ``v0.31.0``)."""

    count: int | None = None
    names: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> VersionChoice:
        text = text.strip()
        if text.isdigit():
            if int(text) < 1:
                raise HistoryError(f"--versions {text}: at least one release")
            return cls(count=int(text))
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        if not names:
            raise HistoryError(f"--versions {text!r}: a count (4) or release names (b10333,b11434)")
        return cls(names=names)


def _tag_forms(name: str) -> set[str]:
    """The tags a user's name of a release may mean: ``b11434``, ``11434``, ``11434.0.0``; ``0.31.0``,
    ``v0.31.0``."""
    bare = name.removeprefix("b").removeprefix("v")
    forms = {name, f"b{bare}", f"v{bare}"}
    if bare.endswith(".0.0") and bare[:-4].isdigit():
        forms.add(f"b{bare[:-4]}")
    return forms


def spread(releases: list[ImageRecord], count: int) -> list[ImageRecord]:
    """``count`` of ``releases`` (oldest first): the newest, the oldest and evenly spaced ones between."""
    n = len(releases)
    if count >= n:
        return list(releases)
    if count == 1:
        return [releases[-1]]
    picks = sorted({round(i * (n - 1) / (count - 1)) for i in range(count)})
    return [releases[i] for i in picks]


def choose(
    releases: list[ImageRecord],
    engine: str,
    versions: VersionChoice,
    since: datetime | None = None,
) -> list[ImageRecord]:
    """The releases of ``engine`` to benchmark, oldest first.

    ``releases`` are the index's image versions of the engine (gone ones are left out); ``since``
    narrows the window by upload time. A named release that is not on the index is an error naming it.
    """
    live = sorted((r for r in releases if r.engine == engine and not r.gone), key=lambda r: r.sort_key)
    if not live:
        raise HistoryError(f"no release of {engine} is known on the package index")
    if versions.names:
        out: list[ImageRecord] = []
        for name in versions.names:
            forms = _tag_forms(name)
            match = [r for r in live if r.tag in forms]
            if not match:
                near = ", ".join(r.tag for r in live[-3:])
                raise HistoryError(f"{engine}: no release {name!r} on the package index (newest: {near})")
            out.append(match[-1])
        unique = {r.digest: r for r in out}.values()  # a release named twice is benchmarked once
        return sorted(unique, key=lambda r: r.sort_key)
    window = [r for r in live if since is None or (r.created is not None and r.created >= since)]
    if not window:
        raise HistoryError(
            f"{engine}: no release uploaded since {since:%Y-%m-%d} (newest: {live[-1].tag}, "
            f"{live[-1].created:%Y-%m-%d})"
            if since and live[-1].created
            else f"{engine}: no release in the window"
        )
    assert versions.count is not None
    return spread(window, versions.count)
