"""``pair_bisect_job``: a bisection the way Pinpoint does it, launched from the UI.

One op over plain library code: the releases between the brackets (given, or the engine's image
versions the warehouse knows between them), then runner/pair_bisect.bisect_by_pairs with the engine
starts of :class:`PairRunnerResource` (llama-server releases on host local, each built for this CPU
on first use), then runner/pair_bisect.store. The warehouse is read before and written after, never
held while engines run. Each step is logged as it is decided, with what it cost.

The bisection sensor launches it for a confirmed change (``bisection_id`` set: the search is stored
under the bisection the regressions asset started, in place of its waiting row).
"""

import dagster as dg

from assets.resources import PairRunnerResource, StrixConfigResource, WarehouseResource
from strix_pipeline.analysis.bisect.releases import releases_between
from strix_pipeline.runner import pair_bisect
from strix_pipeline.runner.pair_model import METRICS, ComparedRelease
from strix_pipeline.runner.pair_runs import PAIR_HOST, pair_log_dir, release_to_run


class PairBisectConfig(dg.Config):
    """Which change to bisect: the release without it, the one with it, and the figure that moved."""

    before: str  # the release without the change, e.g. "b9851"
    after: str  # the release with it, e.g. "b10531"
    metric: str = "prefill_tokens_per_s"
    engine: str = "llamacpp"
    # the releases strictly between, in version order; empty: the engine's releases the warehouse
    # knows between the two (its `images`, as `strix images` lists them)
    between: list[str] = []
    target: float = 0.05  # the step chased: "different" at half of it or more, "same" within half of it
    cap: int | None = None  # the most pairs a comparison runs (default [analysis] compare_max_pairs)
    max_steps: int | None = None  # the most midpoints decided (default: a binary search's need)
    max_pairs: int | None = None  # the most pairs in all (default [analysis] bisect_max_pairs)
    seed: int = 0
    # set by the bisection sensor: the bisection the regressions asset started, and its change's series
    bisection_id: str = ""
    change_id: str = ""
    fingerprint: str = ""
    scenario: str = ""
    level: int = 0


def _between(config: PairBisectConfig, known: list) -> list[ComparedRelease]:
    if config.between:
        return [release_to_run(t) for t in config.between]
    by_tag = {i.tag: i for i in known}
    missing = [t for t in (config.before, config.after) if t not in by_tag]
    if missing:
        raise dg.Failure(
            f"no {config.engine} release {', '.join(missing)} in the warehouse's images: give `between`, "
            "or discover the releases first (strix images / the refresh job)"
        )
    found = releases_between(known, by_tag[config.before], by_tag[config.after], measured=set())
    return [release_to_run(c.version) for c in found]


@dg.op(
    description="Bisect a change by pairs (Pinpoint): each midpoint compared with both brackets, "
    "pairs added only on unknown; stores the bisection, its steps and every comparison."
)
def pair_bisection(
    context: dg.OpExecutionContext,
    config: PairBisectConfig,
    strix: StrixConfigResource,
    warehouse: WarehouseResource,
    pair_runner: PairRunnerResource,
) -> dg.Output[str]:
    cfg = strix.get()
    if config.metric not in METRICS:
        raise dg.Failure(f"metric {config.metric!r}: one of {', '.join(METRICS)}")
    with warehouse.reader() as wh:
        known = wh.known_images(config.engine)
    between = _between(config, known)
    log_dir = pair_log_dir(cfg, "pair-bisect")
    say = context.log.info
    say(f"{len(between)} releases between {config.before} and {config.after}; engine logs in {log_dir}")
    found = pair_bisect.bisect_by_pairs(
        pair_runner.run_one(cfg, log_dir, say),
        release_to_run(config.before),
        release_to_run(config.after),
        between,
        metric=config.metric,
        host=PAIR_HOST,
        engine=config.engine,
        cap=config.cap or cfg.analysis.compare_max_pairs,
        target=config.target,
        seed=config.seed,
        max_steps=config.max_steps,
        max_pairs=config.max_pairs or cfg.analysis.bisect_max_pairs,
        change_id=config.change_id or None,
        bisection=config.bisection_id or None,
        fingerprint=config.fingerprint,
        scenario=config.scenario,
        level=config.level,
        progress=say,
    )
    with warehouse.writer() as wh:
        pair_bisect.store(wh, found)
    r = found.record
    return dg.Output(
        r.bisection_id,
        metadata={
            "status": r.status,
            "first_release": r.first_release or "",
            "last_without": r.last_without or "",
            "reason": r.reason or "",
            "steps": dg.MetadataValue.md(
                "\n".join(f"{s.step}. {s.version}: **{s.side}**: {s.note}" for s in found.steps) or "none"
            ),
            "engine_starts": found.engine_starts,
            "pairs": found.pairs_spent,
        },
    )


@dg.job(description="A bisection by pairs (Pinpoint), one release range, launched with its config.")
def pair_bisect_job() -> None:
    pair_bisection()
