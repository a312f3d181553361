"""The week's comparisons by pairs on host local: ``release_comparisons``, the new
release against the previous one, ``canary_comparison``, the canary against itself (an A/A), and
``engine_comparison``, the decision's baseline against its candidate engine.

After new results, when the two newest llama-server releases measured on host local have not been
compared yet, they are run in balanced random AB/BA pairs (runner/pairs.compare_releases, a fresh
server per run, pairs added only while a metric is *unknown*, up to ``[analysis] compare_max_pairs``)
and the comparison is stored (``comparisons``, ``comparison_runs``; `strix changes` lists it). It
runs in host local's pool: never beside a benchmark on the same cores. The warehouse is read before
and written after, never held while engines run.
"""

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime

import dagster as dg

from assets.analysis import EAGER
from assets.benchmark import host_pool
from assets.resources import PairRunnerResource, StrixConfigResource, WarehouseResource
from strix_pipeline.analysis.decision.criteria import MATCHUPS
from strix_pipeline.analysis.decision.gather import gather_evidence
from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.measured import week_start
from strix_pipeline.planning.production_baseline import ProductionReadError
from strix_pipeline.planning.targets import canaries
from strix_pipeline.records import ImageRecord
from strix_pipeline.runner.box_pairs import compare_on_box, night_sides
from strix_pipeline.runner.engine_comparison import METRICS, compare_engines, engine_records, engine_sides
from strix_pipeline.runner.pair_model import PairsResult
from strix_pipeline.runner.pair_records import records
from strix_pipeline.runner.pair_runs import PAIR_HOST, pair_log_dir, release_to_run
from strix_pipeline.runner.pairs import compare_releases
from strix_pipeline.warehouse import Warehouse

ENGINE = "llamacpp"  # the engine comparisons by pairs can start on host local
TARGET = 0.05  # the step the week's comparison chases: a 5 % change


def comparison_asset(description: str):
    """A weekly comparison by pairs: after new results, in host local's pool (it starts engines there)."""
    return dg.asset(
        group_name="analysis",
        pool=host_pool(PAIR_HOST),
        deps=["run_aggregates"],
        automation_condition=EAGER,
        description=description,
    )


def _seed(previous: str, newest: str) -> int:
    """The pairs' AB/BA order, the same for the same two releases (a re-run replays it)."""
    return int(hashlib.sha256(f"{previous}->{newest}".encode()).hexdigest()[:8], 16)


@comparison_asset(
    description=(
        "The week's new llama-server release against the previous one on host local, by balanced "
        "random AB/BA pairs (a fresh server per run; pairs added only while a metric is unknown, up "
        "to [analysis] compare_max_pairs): different / same / unknown per metric, stored in "
        "`comparisons`. Nothing to do when those two were compared already."
    ),
)
def release_comparisons(
    context: dg.AssetExecutionContext,
    strix: StrixConfigResource,
    warehouse: WarehouseResource,
    pair_runner: PairRunnerResource,
) -> dg.MaterializeResult:
    config = strix.get()
    if PAIR_HOST not in config.hosts or ENGINE not in config.engines:
        return dg.MaterializeResult(metadata={"compared": f"nothing: no host {PAIR_HOST} running {ENGINE}"})
    with warehouse.reader() as wh:
        due = wh.uncompared_newest(PAIR_HOST, ENGINE) if "comparisons" in wh.table_names() else None
    if due is None:
        return dg.MaterializeResult(
            metadata={"compared": "nothing new: fewer than two releases, or the newest two compared already"}
        )
    previous, newest = due
    result = _compare_and_store(
        context,
        config,
        warehouse,
        pair_runner,
        previous,
        newest,
        _seed(previous, newest),
        f"{newest} against {previous}",
    )
    return dg.MaterializeResult(
        metadata={
            "compared": f"{newest} against {previous}",
            "comparison_id": result.comparison_id,
            "engine_starts": len(result.runs),
            "verdict": result.headline(),
            "family_wise": result.family_text(),
            "verdicts": verdict_table(result, "B/A: the newest over the previous"),
        }
    )


def _compare_and_store(
    context: dg.AssetExecutionContext,
    config: StrixConfig,
    warehouse: WarehouseResource,
    pair_runner: PairRunnerResource,
    a: str,
    b: str,
    seed: int,
    what: str,
) -> PairsResult:
    """Release ``b`` against ``a`` by pairs on host local (the warehouse not held while engines run),
    then stored whole: both weekly comparisons' one way of doing it."""
    say = context.log.info
    log_dir = pair_log_dir(config)
    say(f"{what} on {PAIR_HOST} by pairs; engine logs in {log_dir}")
    result = compare_releases(
        pair_runner.run_one(config, log_dir, say),
        release_to_run(a),
        release_to_run(b),
        host=PAIR_HOST,
        engine=ENGINE,
        cap=config.analysis.compare_max_pairs,
        target=TARGET,
        seed=seed,
        progress=say,
    )
    with warehouse.writer() as wh:
        wh.save_comparison(*records(result))
    return result


def verdict_table(result: PairsResult, ratio_is: str) -> dg.TableMetadataValue:
    """A comparison's verdicts per metric, as the UI shows a table."""
    rows = [
        dg.TableRecord(
            {
                "metric": m.metric,
                "ratio": round(m.ratio, 4) if m.ratio is not None else None,
                "low": round(m.low, 4) if m.low is not None else None,
                "high": round(m.high, 4) if m.high is not None else None,
                "verdict": m.verdict,
                "pairs": m.pairs,
            }
        )
        for m in result.metrics
    ]
    return dg.MetadataValue.table(
        rows,
        schema=dg.TableSchema(
            [
                dg.TableColumn("metric", "string"),
                dg.TableColumn("ratio", "float", description=ratio_is),
                dg.TableColumn("low", "float"),
                dg.TableColumn("high", "float"),
                dg.TableColumn("verdict", "string", description="different / same / unknown / inconclusive"),
                dg.TableColumn("pairs", "int"),
            ]
        ),
    )


@comparison_asset(
    description=(
        "The canary against itself on host local, by balanced random AB/BA pairs, once a week (an A/A): "
        "every metric should come out *same* at the 5 % target. One that comes out *different* or stays "
        "unknown says this week's host cannot resolve a 5 % step -- the week's comparisons are read "
        "with that in mind. Stored in `comparisons` with the canary's release on both sides."
    ),
)
def canary_comparison(
    context: dg.AssetExecutionContext,
    strix: StrixConfigResource,
    warehouse: WarehouseResource,
    pair_runner: PairRunnerResource,
) -> dg.MaterializeResult:
    config = strix.get()
    canary = next((c for c in canaries(config) if c.host == PAIR_HOST and c.engine == ENGINE), None)
    if canary is None or PAIR_HOST not in config.hosts:
        return dg.MaterializeResult(
            metadata={"compared": f"nothing: no canary of {ENGINE} on host {PAIR_HOST} ([analysis] canary)"}
        )
    release, now = canary.version, datetime.now(UTC)
    since = week_start(config.project.schedule, now, config.project.timezone)
    with warehouse.reader() as wh:
        done = "comparisons" in wh.table_names() and wh.compared_with_itself_since(
            PAIR_HOST, ENGINE, release, since
        )
    if done:
        return dg.MaterializeResult(
            metadata={"compared": f"nothing new: {release} was compared with itself this week"}
        )
    result = _compare_and_store(
        context,
        config,
        warehouse,
        pair_runner,
        release,
        release,
        _seed(release, f"{release}@{since:%G-W%V}"),
        f"the canary {release} against itself (A/A)",
    )
    not_same = [m.metric for m in result.metrics if m.verdict != "same"]
    if not_same:
        context.log.warning(
            f"the canary against itself is not *same* for {', '.join(not_same)}: this week the host does not "
            f"resolve a {TARGET:.0%} step there"
        )
    return dg.MaterializeResult(
        metadata={
            "compared": f"{release} against itself",
            "comparison_id": result.comparison_id,
            "engine_starts": len(result.runs),
            # an A/A's whole point: every metric the same within the target, else the host is the news
            "host_resolves_target": not not_same,
            "verdict": result.headline(),
            "family_wise": result.family_text(),
            "verdicts": verdict_table(result, "B/A: the canary over itself (1 expected)"),
        }
    )


@comparison_asset(
    description=(
        "The decision's match-ups by interleaved runs, once a week per pair of releases: on the decision's "
        "host when it is local, the baseline engine against the candidate as their weekly runs configure "
        "them, in balanced random AB/BA pairs (a fresh server per run), TTFT at the decision's concurrency "
        "-- the production match-up, then the equal-weights match-up. C3 decides on the paired ratio of "
        "the p95s when its releases are the ones it judges. Stored in `comparisons` with `matchup`."
    ),
)
def engine_comparison(
    context: dg.AssetExecutionContext,
    strix: StrixConfigResource,
    warehouse: WarehouseResource,
    pair_runner: PairRunnerResource,
) -> dg.MaterializeResult:
    config = strix.get()
    now = datetime.now(UTC)
    since = week_start(config.project.schedule, now, config.project.timezone)
    done: dict[str, str] = {}
    tables: dict[str, dg.TableMetadataValue] = {}
    with warehouse.reader() as wh:
        stored = (
            wh.engine_comparisons(config.decision.host, METRICS[0], since)
            if "comparisons" in wh.table_names()
            else {}
        )
    for matchup in MATCHUPS:
        sides = engine_sides(config, matchup)
        if isinstance(sides, str):
            done[matchup] = f"nothing: {sides}"
            continue
        a, b = sides.release(sides.baseline, config), sides.release(sides.candidate, config)
        last = stored.get(matchup)
        # one that kept no pair (every run on a busy host, or failed) is run again
        if last is not None and (last.release_a, last.release_b) == (a.tag, b.tag) and last.ratio is not None:
            done[matchup] = f"nothing new: {b.tag} against {a.tag} compared this week ({last.comparison_id})"
            continue
        log_dir = pair_log_dir(config, "engines")
        context.log.info(
            f"{matchup} match-up: {b.tag} against {a.tag} on {sides.baseline.host} by pairs; "
            f"engine logs in {log_dir}"
        )
        result = compare_engines(
            config,
            sides,
            pair_runner.engine_runs(config, sides, log_dir, context.log.info),
            seed=_seed(a.tag, f"{b.tag}@{since:%G-W%V}"),
            progress=context.log.info,
        )
        with warehouse.writer() as wh:
            wh.save_comparison(*engine_records(result, matchup))
        done[matchup] = f"{b.tag} against {a.tag}: {result.comparison_id}, {len(result.runs)} engine starts"
        tables[f"verdicts_{matchup}"] = verdict_table(result, "B/A: the candidate over the baseline")
    return dg.MaterializeResult(metadata={**{f"compared_{p}": text for p, text in done.items()}, **tables})


def build_box_comparisons(config: StrixConfig) -> list[dg.AssetsDefinition]:
    """The Box's night of pairs when the decision's host is a Box: an asset in that host's pool (one
    engine at a time there, beside its benchmarks), else none."""
    host = config.decision.host
    if getattr(config.hosts.get(host), "kind", None) != "docker":
        return []

    @dg.asset(
        name="box_engine_comparison",
        group_name="analysis",
        pool=host_pool(host),
        deps=["run_aggregates"],
        automation_condition=EAGER,
        description=(
            f"The decision's production match-up by interleaved runs on host `{host}`, once a week per "
            "candidate image: production as deployed (read from the Box, read-only) against the candidate, "
            "as [decision] box_pairs balanced AB/BA pairs of fresh Box runs (production stopped and "
            "restored around each, the night's window kept; the plan counts their runs), judged in one "
            "look at 5 %. C3, C5 and (with the owner's SLOs, at their load) C6 decide on their "
            "paired ratios; without them a switch is at most provisional. "
            "Stored in `comparisons` with `matchup`."
        ),
    )
    def _asset(
        context: dg.AssetExecutionContext, strix: StrixConfigResource, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata=box_night(strix.get(), warehouse, context.log.info))

    return [_asset]


def box_night(config: StrixConfig, warehouse: WarehouseResource, log: Callable[[str], None]) -> dict:
    """The Box's night of pairs: production as deployed against the newest fresh candidate, once a
    week per pair of images; the asset's metadata (what was compared, or why nothing)."""
    d = config.decision
    if d.box_pairs == 0:
        return {"compared": "nothing: [decision] box_pairs = 0"}
    now = datetime.now(UTC)
    since = week_start(config.project.schedule, now, config.project.timezone)
    with warehouse.reader() as wh:
        candidate = newest_candidate_image(wh, config, now)
        known = wh.known_images(d.baseline_engine)
        stored = wh.engine_comparisons(d.host, METRICS[0], since) if "comparisons" in wh.table_names() else {}
    if candidate is None:
        return {"compared": f"nothing: no fresh {d.candidate_engine} run on {d.host} to pair"}
    try:
        sides = night_sides(config, candidate, known)
    except ProductionReadError as e:
        return {"compared": f"nothing: {e}"}
    a, b = sides.release(sides.baseline, config), sides.release(sides.candidate, config)
    last = stored.get("production")
    if last is not None and (last.release_a, last.release_b) == (a.tag, b.tag) and last.ratio is not None:
        return {"compared": f"nothing new: {b.tag} against {a.tag} this week ({last.comparison_id})"}
    log(f"production match-up on {d.host}: {b.tag} against {a.tag}, {d.box_pairs} pairs")
    result = compare_on_box(
        config,
        sides,
        run_prefix=f"pairs-{now:%Y%m%dT%H%M%S}",
        seed=_seed(a.tag, f"{b.tag}@{since:%G-W%V}"),
        progress=log,
    )
    with warehouse.writer() as wh:
        wh.save_comparison(*engine_records(result, "production"))
    return {
        "compared": f"{b.tag} against {a.tag}: {result.comparison_id}, {len(result.runs)} Box runs",
        "verdicts_production": verdict_table(result, "B/A: the candidate over production as deployed"),
    }


def newest_candidate_image(wh: Warehouse, config: StrixConfig, now: datetime) -> ImageRecord | None:
    """The image of the newest fresh candidate run on the decision's host (of ``decision.candidate_model``
    when set): the one C3 judges, as the registry knows it."""
    d = config.decision
    ev = gather_evidence(wh, config, now)
    runs = [
        r
        for r in ev.runs
        if r.engine == d.candidate_engine
        and ev.fresh(r)
        and r.usable
        and d.candidate_model in (None, r.model_profile)
    ]
    if not runs:
        return None
    newest = max(runs, key=lambda r: r.started_at)
    return next((i for i in wh.known_images(d.candidate_engine) if i.digest == newest.image_digest), None)
