"""A week's runs as the plan sees them: the images the weekly schedule benchmarks, expanded to targets,
each with its expected duration and how long it has waited.

Durations come as arguments (measured history per series, ``warehouse.past_runs.history_durations``); a
series without one gets the default estimate. :func:`standard_images` is the configuration's own week
before the warehouse knows any image: one image per release slot and floating tag of each source,
and the canary -- what `strix plan --week` lays out on a fresh Box.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.due import benchmarked
from strix_pipeline.planning.estimate import estimate
from strix_pipeline.planning.measured import Measured, MeasuredRun
from strix_pipeline.planning.measured import measured as measured_since
from strix_pipeline.planning.night_fit import PlannedRun, pair_slot
from strix_pipeline.planning.priority import run_priority
from strix_pipeline.planning.targets import (
    BenchmarkTarget,
    canaries,
    canary_images,
    targets_for,
    wanted_images,
)
from strix_pipeline.records import ImageRecord

Series = tuple[str, str, str, str]  # (host, engine, model profile, scenario profile)
NEWEST = "(newest release)"  # the tag standard_images gives a source's release slot


@dataclass(frozen=True)
class ThisWeek:
    """The week as the weekly schedule, the new-image sensor and `strix plan --week` all see it
    (:func:`this_week`)."""

    start: datetime  # the week's start: the schedule's fire time
    # the current images and each local build (planning.targets.wanted_images): what the sensor follows
    current: list[ImageRecord]
    # the canary's images not among them: the same pinned build every week, the schedule's alone
    canary: list[ImageRecord]
    measured: frozenset[Measured]  # the targets measured since ``start`` (planning.measured)

    @property
    def images(self) -> list[ImageRecord]:
        """What the week benchmarks: the current images, each local build, then the canary."""
        return self.current + self.canary

    def due(self, config: StrixConfig) -> list[ImageRecord]:
        """The images some target of which has not measured this week: the ones still to ask for."""
        return [i for i in self.images if not benchmarked(config, i, self.measured)]


def this_week(
    config: StrixConfig,
    images: list[ImageRecord],
    local: list[ImageRecord],
    rows: list[MeasuredRun],
    start: datetime,
) -> ThisWeek:
    """The week from ``start``: the current images, the local builds and the canary, and what of them
    the one account of what is measured (``rows``, the warehouse's) already has since ``start``."""
    current = wanted_images(config, images, local)
    seen = {i.digest for i in current}
    canary = [i for i in canary_images(config, images) if i.digest not in seen]
    return ThisWeek(start, current, canary, measured_since(rows, since=start))


def run_name(target: BenchmarkTarget) -> str:
    image = target.image
    where = f"{image.registry}/{image.repository}:{image.tag}" if image else "the local build"
    return f"{target.engine} {target.model} @ {where}"


def week_runs(
    config: StrixConfig,
    images: list[ImageRecord],
    durations: Mapping[Series, list[float]],
    *,
    waited: Mapping[Measured, int] | None = None,
    measured: frozenset[Measured] = frozenset(),
    pair_runs: int = 0,
    deferred_since: Mapping[Measured, datetime] | None = None,
) -> list[PlannedRun]:
    """Every target of ``images`` not yet ``measured`` this week, as runs to plan; ``waited`` gives the
    weeks a target has been deferred, ``deferred_since`` when a night first deferred it by name (it
    leads the next night after the decision's runs and the canary); ``pair_runs`` extra runs per
    comparison (C3/C5's pair), by default the Box's night of pairs (:func:`box_pair_runs`)."""
    canary = {i.digest for i in canary_images(config, images)}
    out: list[PlannedRun] = []
    sides: dict[str, list[PlannedRun]] = {}
    d = config.decision
    for image in images:
        prio = run_priority(config, image, images)
        for t in targets_for(config, image):
            key = Measured(t.host, t.engine, image.digest, t.model)
            if key in measured:
                continue
            est = estimate(list(durations.get((t.host, t.engine, t.model, t.profile), [])))
            weeks = (waited or {}).get(key, 0)
            since = (deferred_since or {}).get(key)
            run = PlannedRun(run_name(t), t.host, est, prio, image.digest in canary, weeks, since)
            out.append(run)
            if t.host == d.host and prio >= 1 and t.model in (d.candidate_model, d.baseline_model):
                sides.setdefault(t.engine, []).append(run)
    extra = pair_runs or box_pair_runs(config)
    pairs = pair_slot("C3/C5", d.host, extra, [r.estimate for rs in sides.values() for r in rs[:1]])
    return out + ([pairs] if pairs else [])


def box_pair_runs(config: StrixConfig) -> int:
    """The runs a night's pairs on the Box take (``[decision] box_pairs``, two runs each: production as
    deployed and the candidate, runner/box_pairs.py); 0 when the decision's host is not a Box."""
    d = config.decision
    host = config.hosts.get(d.host)
    return 2 * d.box_pairs if host is not None and host.kind == "docker" else 0


def standard_images(config: StrixConfig, now: datetime) -> list[ImageRecord]:
    """One image per release slot (``benchmark_latest``) and floating tag of every source of every
    benchmarked engine, and each pinned canary's tag in its engine's first official source."""
    out: list[ImageRecord] = []
    engines = {r.engine for runs in config.runs.values() for r in runs}
    for name in sorted(engines):
        engine = config.engines[name]
        for source in engine.images:
            for n in range(engine.benchmark_latest):
                tag = NEWEST if n == 0 else f"(release {n + 1} back)"
                out.append(_image(name, source.registry, source.repository, tag, False, f"9{9 - n}", now))
            out += [
                _image(name, source.registry, source.repository, t, True, "", now) for t in source.floating
            ]
    for c in canaries(config):
        engine = config.engines.get(c.engine)
        sources = [s for s in (engine.images if engine else []) if s.official] or (
            engine.images if engine else []
        )
        if sources and not any(i.engine == c.engine and i.tag == c.version for i in out):
            out.append(
                _image(c.engine, sources[0].registry, sources[0].repository, c.version, False, "0", now)
            )
    return out


def _image(
    engine: str, registry: str, repository: str, tag: str, floating: bool, key: str, now: datetime
) -> ImageRecord:
    digest = "sha256:" + hashlib.sha256(f"{registry}/{repository}:{tag}".encode()).hexdigest()
    return ImageRecord(
        engine=engine,
        registry=registry,
        repository=repository,
        tag=tag,
        digest=digest,
        floating=floating,
        created=None,
        version=None if floating else tag,
        revision=None,
        labels=None,
        sort_key=key,
        first_seen=now,
        last_seen=now,
    )
