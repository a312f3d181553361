"""The order a night's runs go in: what the decision needs first, and no run starved for long.

- :func:`run_priority`: 2 the newest official candidate image (C1 needs it), 1 the baseline engine's
  images (what production serves: the other side of C3 and C5), 0 the rest -- Dagster's queue priority;
- :func:`rank`: the plan's order. A run deferred for ``starve_weeks`` weeks goes before everything;
  then the runs the issue calls priority 0 -- the decision's (run_priority >= 1) and the canary --;
  then what an earlier night deferred by name (it leads the next night, after those); then the rest,
  a deferred run gaining one step of priority for each week it has waited.

``starve_weeks`` is the configuration's ``[project] starve_weeks`` (default :data:`STARVE_WEEKS`).
"""

from __future__ import annotations

from strix_pipeline.config import StrixConfig
from strix_pipeline.records import ImageRecord

# a run deferred this many weeks goes first, whatever its priority: nothing waits longer than this
STARVE_WEEKS = 2


def rank(
    priority: int,
    canary: bool,
    weeks_waited: int,
    starve_weeks: int = STARVE_WEEKS,
    deferred: bool = False,
) -> tuple[int, int, int, int, int]:
    """A sort key, smallest first: starved, then first (the decision's and the canary), then what an
    earlier night deferred by name (it leads the next night after those), then the aged priority,
    the canary ahead of its equals -- each negated."""
    starved = weeks_waited >= starve_weeks
    first = canary or priority >= 1
    return (-int(starved), -int(first), -int(deferred), -(priority + weeks_waited), -int(canary))


def run_priority(config: StrixConfig, image: ImageRecord, images: list[ImageRecord]) -> int:
    """Higher runs first: 2 the newest image of the candidate engine's official sources (C1 needs it),
    1 the baseline engine's images (what production serves, the pair C3 and C5 compare against), 0 the
    rest. ``images`` are the images requested with it (to tell the newest)."""
    d = config.decision
    if image.engine == d.candidate_engine:
        engine = config.engines.get(image.engine)
        official = {(s.registry, s.repository) for s in (engine.images if engine else []) if s.official}

        def is_official(i: ImageRecord) -> bool:
            return i.engine == image.engine and (i.registry, i.repository) in official

        if is_official(image):
            newest = max((i for i in images if is_official(i)), key=lambda i: i.sort_key or "", default=None)
            if newest is not None and newest.digest == image.digest:
                return 2
    if image.engine == d.baseline_engine:
        return 1
    return 0
