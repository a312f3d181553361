"""``release_comparisons``: the week's new release against the previous one, by pairs (issue 33, item 2).

After new results, when the two newest llama-server releases measured on host local have not been
compared yet, they are run in balanced random AB/BA pairs (runner/pairs.compare_releases, a fresh
server per run, pairs added only while a metric is *unknown*, up to ``[analysis] compare_max_pairs``)
and the comparison is stored (``comparisons``, ``comparison_runs``; `strix changes` lists it). It
runs in host local's pool: never beside a benchmark on the same cores. The warehouse is read before
and written after, never held while engines run.
"""

import hashlib

import dagster as dg

from assets.analysis import EAGER
from assets.benchmark import host_pool
from assets.resources import PairRunnerResource, StrixConfigResource, WarehouseResource
from strix_pipeline.runner.pair_runs import PAIR_HOST, pair_log_dir, release_to_run
from strix_pipeline.runner.pairs import compare_releases, records

ENGINE = "llamacpp"  # the engine comparisons by pairs can start on host local
TARGET = 0.05  # the step the week's comparison chases (issue 33: a 5 % change)


def _seed(previous: str, newest: str) -> int:
    """The pairs' AB/BA order, the same for the same two releases (a re-run replays it)."""
    return int(hashlib.sha256(f"{previous}->{newest}".encode()).hexdigest()[:8], 16)


@dg.asset(
    group_name="analysis",
    pool=host_pool(PAIR_HOST),
    deps=["run_aggregates"],
    automation_condition=EAGER,
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
    say = context.log.info
    log_dir = pair_log_dir(config)
    say(f"{newest} against {previous} on {PAIR_HOST} by pairs; engine logs in {log_dir}")
    result = compare_releases(
        pair_runner.run_one(config, log_dir, say), release_to_run(previous), release_to_run(newest),
        host=PAIR_HOST, engine=ENGINE, cap=config.analysis.compare_max_pairs, target=TARGET,
        seed=_seed(previous, newest), progress=say,
    )  # fmt: skip
    with warehouse.writer() as wh:
        wh.save_comparison(*records(result))
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
    return dg.MaterializeResult(
        metadata={
            "compared": f"{newest} against {previous}",
            "comparison_id": result.comparison_id,
            "engine_starts": len(result.runs),
            "verdicts": dg.MetadataValue.table(
                rows,
                schema=dg.TableSchema(
                    [
                        dg.TableColumn("metric", "string"),
                        dg.TableColumn("ratio", "float", description="B/A: the newest over the previous"),
                        dg.TableColumn("low", "float"),
                        dg.TableColumn("high", "float"),
                        dg.TableColumn(
                            "verdict", "string", description="different / same / unknown / inconclusive"
                        ),
                        dg.TableColumn("pairs", "int"),
                    ]
                ),
            ),
        }
    )
