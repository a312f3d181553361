"""What is due: which wanted images to request now, given what was requested and what is measured.

The window is read as a value (:func:`strix_pipeline.planning.window.window_at`): a host outside its
window makes the image wait; nothing here reads an exception as an answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.measured import Measured
from strix_pipeline.planning.targets import targets_for
from strix_pipeline.planning.window import keeps_window, window_at
from strix_pipeline.records import ImageRecord


def hosts_in_window(config: StrixConfig, image: ImageRecord, now: datetime) -> bool:
    """True when every host that would run ``image`` is inside its maintenance window now.

    The local host has no window (nobody is served from it); a Box runs benchmarks only in its
    window, so a new image found at noon waits for the night instead of failing its only run.
    """
    hosts = [config.hosts[h] for h in sorted({t.host for t in targets_for(config, image)})]
    return all(
        window_at(h, config.project.schedule, now, config.project.timezone).open
        for h in hosts
        if keeps_window(h)
    )


@dataclass(frozen=True)
class Due:
    """Which wanted images to benchmark now, given the digests already requested."""

    now: list[ImageRecord]  # not requested before, and every host that runs it is in its window
    waiting: list[ImageRecord]  # not requested before, a host outside its window: asked again later
    requested: set[str]  # the digests requested so far, these included
    measured: list[ImageRecord] = field(default_factory=list)  # already benchmarked: not requested
    # requested before, but a run of it was deferred since (by name, to the next night): asked again
    again: list[ImageRecord] = field(default_factory=list)


def benchmarked(config: StrixConfig, image: ImageRecord, measured: frozenset[Measured]) -> bool:
    """Every (host, model profile) that runs ``image`` has a measured run of its digest."""
    targets = targets_for(config, image)
    return bool(targets) and all(
        Measured(t.host, t.engine, image.digest, t.model) in measured for t in targets
    )


def due_images(
    config: StrixConfig,
    wanted: list[ImageRecord],
    requested: set[str],
    now: datetime,
    measured: frozenset[Measured] = frozenset(),
    deferred: Mapping[str, int] | None = None,
    seen_deferred: Mapping[str, int] | None = None,
) -> Due:
    """Each digest is benchmarked once; outside a host's maintenance window it waits (stays unrequested).

    ``measured`` is the account (planning.measured): a digest that `strix run`, a backfill or a
    history already measured everywhere it runs is not requested again (the sensor's own run keys
    know nothing of those runs). ``deferred`` is the account's other half (planning.measured.deferrals:
    per digest, its runs deferred and not measured since) and ``seen_deferred`` that count when the
    digest was last requested: a digest requested before whose count grew is due again, as the
    schedule's week finds it not measured -- the cursor is no account of its own.
    """
    deferred, seen_deferred = deferred or {}, seen_deferred or {}

    def owed(i: ImageRecord) -> bool:
        return deferred.get(i.digest, 0) > seen_deferred.get(i.digest, 0)

    unseen = [i for i in wanted if i.digest not in requested or owed(i)]
    done = [i for i in unseen if measured and benchmarked(config, i, measured)]
    unseen = [i for i in unseen if i not in done]
    ready = [hosts_in_window(config, i, now) for i in unseen]
    go = [i for i, ok in zip(unseen, ready, strict=True) if ok]
    wait = [i for i, ok in zip(unseen, ready, strict=True) if not ok]
    again = [i for i in go if i.digest in requested]
    return Due(go, wait, requested | {i.digest for i in go} | {i.digest for i in done}, done, again)
