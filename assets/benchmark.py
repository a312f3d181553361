"""`benchmark_run`: the standard suite for one image version on its host, loaded into the warehouse."""

from typing import Any

import dagster as dg

from assets.partitions import HOST_TAG, NIGHT_TAG, image_versions
from assets.resources import HostAccessResource, StrixConfigResource, WarehouseResource
from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.targets import (
    canary_images,
    find_image,
    parse_partition_key,
    targets_for,
    wanted_images,
)
from strix_pipeline.records import ImageRecord, LevelAggregate, RunRecord, RunResult
from strix_pipeline.runner import run_benchmark
from strix_pipeline.runner.estimates import read_estimate
from strix_pipeline.runner.night_pull import pull_before_stop
from strix_pipeline.runner.night_runs import NightLog, NightOutcome, NightRequest, run_night, series
from strix_pipeline.units import gib, gib_text
from strix_pipeline.usable import completeness, deferred, memory_back, served
from strix_pipeline.warehouse import spool
from strix_pipeline.warehouse.past_runs import deferred_runs

# a run of the night not finished yet, that will still come to its benchmark
_TO_COME = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]

COMPLETENESS = "benchmark_complete"
ENGINE_SERVED = "engine_served"
MEMORY_RETURNED = "memory_back_at_baseline"
PRODUCTION_RESTORED = "production_restored"


def night_runs_to_come(instance: dg.DagsterInstance, host: str, night: str, done: set[str]) -> int:
    """The runs of weekly night ``night`` on ``host`` still to come to their benchmark: queued or
    running, and not among ``done`` (the runs whose part of the night is over)."""
    if not night:
        return 0
    runs = instance.get_runs(
        filters=dg.RunsFilter(tags={NIGHT_TAG: night, HOST_TAG: host}, statuses=_TO_COME)
    )
    return sum(1 for r in runs if r.run_id not in done)


def host_pool(host: str) -> str:
    """The concurrency pool of a host: one engine at a time shares its unified memory."""
    return f"host_{host}".replace("-", "_")


def _num(v: float | None, digits: int = 2) -> float | None:
    """A number for table metadata: a float (rounded for reading), None when missing -- never text."""
    return None if v is None else round(float(v), digits)


# (column, Dagster type, description): the UI sorts and shows numbers as numbers
SUMMARY_COLUMNS = [
    ("run_id", "string", "the run's id (its last 6 characters)"),
    ("scenario", "string", None),
    ("level", "int", "concurrency, input tokens, ... (the scenario's level)"),
    ("ok", "int", "measured requests that succeeded"),
    ("failed", "int", "measured requests that failed"),
    ("ttft_p50_ms", "float", "ms"),
    ("ttft_p95_ms", "float", "ms"),
    ("tpot_p50_ms", "float", "ms"),
    ("e2e_p95_ms", "float", "ms"),
    ("output_tok_s", "float", "output tokens/s"),
    ("prefill_tok_s", "float", "prefill tokens/s"),
]


def _outage(run: RunRecord, handed_over: int = 0) -> str:
    if run.production_down_at is None:
        return ""
    if run.production_up_at is None and handed_over:
        return (
            f"; production down since {run.production_down_at:%H:%M:%S} "
            f"for the night's {handed_over} more run(s)"
        )
    if run.production_up_at is None:
        return f"; production DOWN since {run.production_down_at:%H:%M:%S}, not back"
    offline = (run.production_up_at - run.production_down_at).total_seconds()
    return f"; production offline {offline:.0f} s (the pipeline's own {run.production_overhead_s or 0:.0f} s)"


def summary_table(aggs: list[LevelAggregate]) -> dg.TableMetadataValue:
    rows = [
        dg.TableRecord(
            {
                "run_id": a.run_id[-6:],
                "scenario": a.scenario,
                "level": a.level,
                "ok": a.requests_ok,
                "failed": a.requests_failed,
                "ttft_p50_ms": _num(a.ttft_p50_ms),
                "ttft_p95_ms": _num(a.ttft_p95_ms),
                "tpot_p50_ms": _num(a.tpot_p50_ms, 3),
                "e2e_p95_ms": _num(a.e2e_p95_ms),
                "output_tok_s": _num(a.output_tokens_per_s),
                "prefill_tok_s": _num(a.prefill_tokens_per_s),
            }
        )
        for a in aggs
    ]
    schema = dg.TableSchema([dg.TableColumn(n, t, description=d) for n, t, d in SUMMARY_COLUMNS])
    return dg.MetadataValue.table(rows, schema=schema)


def key_figures(results: list[RunResult], concurrency: int) -> dict[str, dg.MetadataValue]:
    """Numeric metadata the asset's plots show over materialisations, per model profile:
    ``<profile>/ttft_p95_ms@<n>`` and ``<profile>/output_tok_s@<n>`` at the decision's concurrency
    ``n`` (when the sweep ran that level), ``<profile>/held_gib`` (memory held after load, GiB =
    2^30 bytes). A figure the run did not measure is left out, never written as 0."""
    out: dict[str, dg.MetadataValue] = {}
    for r in results:
        model = r.run.model_profile
        at_n = next(
            (a for a in r.aggregates if a.scenario == "concurrency_sweep" and a.level == concurrency), None
        )
        if at_n is not None and at_n.requests_ok > 0:
            if at_n.ttft_p95_ms is not None:
                out[f"{model}/ttft_p95_ms@{concurrency}"] = dg.MetadataValue.float(float(at_n.ttft_p95_ms))
            if at_n.output_tokens_per_s is not None:
                out[f"{model}/output_tok_s@{concurrency}"] = dg.MetadataValue.float(
                    float(at_n.output_tokens_per_s)
                )
        if r.run.held_bytes is not None:
            out[f"{model}/held_gib"] = dg.MetadataValue.float(round(gib(r.run.held_bytes), 3))
    return out


class BenchmarkRunConfig(dg.Config):
    """Set in the launchpad: a manual run outside the host's maintenance window must say so."""

    force: bool = False


def _check_specs(key: str) -> list[dg.AssetCheckSpec]:
    """The checks every run of the asset answers: served, complete, memory back, production back."""
    return [
        dg.AssetCheckSpec(
            ENGINE_SERVED,
            asset=key,
            description=(
                "the engine started and served measured requests "
                "(a run that measured nothing fails here, with its reason)"
            ),
        ),
        dg.AssetCheckSpec(
            COMPLETENESS, asset=key, description="every level has its requests or a recorded failure"
        ),
        dg.AssetCheckSpec(
            MEMORY_RETURNED,
            asset=key,
            description="memory returned to the idle baseline after the engine stopped",
        ),
        dg.AssetCheckSpec(
            PRODUCTION_RESTORED,
            asset=key,
            description="the host's production engine is running and healthy again after the benchmark",
        ),
    ]


def _description(host: str) -> str:
    return (
        "The standard suite (smoke, concurrency sweep, prefill ladder, decode, prefix cache, "
        f"memory) for one image version on host `{host}`, for every model profile configured for "
        "that engine there; raw requests, aggregates, memory samples and server metrics loaded into "
        "the warehouse in one transaction per run. A run's id derives from the Dagster run, so "
        "re-executing that Dagster run replaces its rows while a new materialisation of the "
        "partition adds a repeat run (the evidence that confirms a provisional change). Failures are "
        f"stored as runs with their reason. Runs in pool `{host_pool(host)}` (limit 1): one engine "
        "at a time per host."
    )


def build_benchmark_asset(host: str, key: str = "benchmark_run") -> dg.AssetsDefinition:
    @dg.asset(
        name=key,
        partitions_def=image_versions,
        pool=host_pool(host),
        group_name="benchmark",
        kinds={"duckdb", "docker"} if host != "local" else {"duckdb", "python"},
        deps=["engine_images"],
        check_specs=_check_specs(key),
        tags={"strix/host": host},
        description=_description(host),
    )
    def _asset(
        context: dg.AssetExecutionContext,
        config: BenchmarkRunConfig,
        strix: StrixConfigResource,
        warehouse: WarehouseResource,
        host_access: HostAccessResource,
    ) -> dg.MaterializeResult:
        run_config, config = config, strix.get()
        image, request = _night_request(context, config, host, warehouse, run_config.force)
        targets = [t for t in targets_for(config, image) if t.host == host]
        if not targets:
            raise dg.Failure(
                f"{context.partition_key}: engine {image.engine} is not configured to run on host {host}"
            )
        # one night for the partition's targets (runner/night_runs.py): production stopped once for all
        # of them (and, inside `strix run`'s loop, for every partition of it), the window checked again
        # before each, what does not fit deferred to the next night by name, in the plan's order
        estimates = {series(t): read_estimate(config, t) for t in targets}
        try:
            outcome = run_night(
                config, targets, estimates, request, context.log, run=run_benchmark, pull=pull_before_stop
            )
        except spool.RunNotStored as e:
            raise dg.Failure(
                description=str(e),
                metadata={"spool_file": str(e.spool), "warehouse": str(e.warehouse or "(not opened)")},
            ) from e
        if outcome.cancelled is not None:
            stopped = outcome.cancelled.result.run
            context.log.warning(f"run {stopped.run_id}: {stopped.failure_reason}")
            raise outcome.cancelled.interrupt
        return dg.MaterializeResult(
            metadata=night_metadata(config, host, image, outcome),
            check_results=night_checks(config, host, outcome, context.log),
        )

    return _asset


def _night_request(
    context: dg.AssetExecutionContext,
    config: StrixConfig,
    host: str,
    warehouse: WarehouseResource,
    force: bool,
) -> tuple[ImageRecord, NightRequest]:
    """The partition's image and what its night is given: the known images, the deferrals, the images
    some series still needs (a Box short of disk prunes its other tracked images before a pull)."""
    pkey = context.partition_key
    with warehouse.reader() as wh:
        image = find_image(wh.known_images(parse_partition_key(pkey).engine), pkey)
        known = wh.known_images()
        deferrals = deferred_runs(wh)
    if image is None:
        raise dg.Failure(f"no known image for partition {pkey}; materialise engine_images first")
    keep = frozenset(i.digest for i in wanted_images(config, known, []) + canary_images(config, known))
    # a night of the weekly schedule spans its Dagster runs (one per image version): production
    # stays down for the night's later runs on this host and the last one starts it
    night_id = context.run.tags.get(NIGHT_TAG)
    return image, NightRequest(
        host,
        context.run_id,
        warehouse.writer,  # the config's warehouse: its file or its DuckLake
        known=known,
        deferred=deferrals,
        night_id=night_id,
        more_to_come=lambda done: night_runs_to_come(
            context.instance, host, night_id or "", done | {context.run_id}
        ),
        force=force,
        keep_images=keep,
    )


def night_checks(
    config: StrixConfig, host: str, outcome: NightOutcome, log: NightLog
) -> list[dg.AssetCheckResult]:
    """The night's runs as the asset's four checks; a night deferred to the next window is no failure:
    its checks fail as warnings, not errors."""
    results = outcome.results
    served_by = [(r, *served(r)) for r in results]
    for r, ok, why in served_by:
        if not ok and deferred(r):
            log.warning(f"run {r.run.run_id} {why}")
        elif not ok:
            logs = config.artifacts_dir() / "logs" / r.run.run_id
            log.error(f"run {r.run.run_id} measured nothing: {why} (logs: {logs})")
    put_off = all(deferred(r) for r in results) and bool(results)
    severity = dg.AssetCheckSeverity.WARN if put_off else dg.AssetCheckSeverity.ERROR
    comp = [completeness(config, r) for r in results]
    mem = [(r.run.run_id, *memory_back(r)) for r in results]
    checks = [
        _check(
            ENGINE_SERVED,
            all(ok for _, ok, _ in served_by),
            severity,
            "\n".join(f"- `{r.run.run_id}`: {why}" for r, _, why in served_by),
        ),
        _check(COMPLETENESS, all(ok for ok, _ in comp), severity, "\n".join(f"- {m}" for _, m in comp)),
        _check(
            MEMORY_RETURNED,
            all(ok for _, ok, _ in mem),
            dg.AssetCheckSeverity.WARN,
            "\n".join(f"- `{rid}`: {why}" for rid, _, why in mem),
        ),
        _production_check(results, outcome.handed_over),
    ]
    if any(r.production_restored is False for r in results):
        log.error(
            f"PRODUCTION NOT RESTORED on host {host}: the next run refuses to start until it is healthy"
        )
    return checks


def _check(name: str, passed: bool, severity: dg.AssetCheckSeverity, detail: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=name, passed=passed, severity=severity, metadata={"detail": dg.MetadataValue.md(detail)}
    )


def _production_check(results: list[RunResult], handed_over: int) -> dg.AssetCheckResult:
    broken = [r for r in results if r.production_restored is False]
    detail = "\n".join(f"- `{r.run.run_id}`: {r.run.failure_reason}" for r in broken) or (
        f"production left down for the night's {handed_over} more run(s) on this host: "
        "the last one starts it (the restore armed on the Box starts it at the window's end if none does)"
        if handed_over
        else "production restored (or none configured on this host)"
    )
    return _check(PRODUCTION_RESTORED, not broken, dg.AssetCheckSeverity.ERROR, detail)


def night_metadata(
    config: StrixConfig, host: str, image: ImageRecord, outcome: NightOutcome
) -> dict[str, Any]:
    """The materialization's metadata: the runs' statuses, what was deferred, production's one stop,
    the summary table and the key figures."""
    results = outcome.results
    first = results[0].run
    where = f"`{image.registry}/{image.repository}:{image.tag}` `{image.digest[:19]}` on `{host}`"
    md = [
        f"**{image.engine}** {where}",
        "",
        *[
            f"- run `{r.run.run_id}`: **{r.run.status}**"
            + (f" — {r.run.failure_reason}" if r.run.failure_reason else "")
            + (f"; held memory {gib_text(r.run.held_bytes)}" if r.run.held_bytes is not None else "")
            + _outage(r.run, outcome.handed_over)
            for r in results
        ],
    ]
    return {
        "dagster/row_count": sum(len(r.requests) for r in results),
        "runs": dg.MetadataValue.json({r.run.run_id: r.run.status for r in results}),
        # deferred to the next night by name (runner/night_hold.py), and the night's one stop
        "deferred": dg.MetadataValue.json(outcome.deferred),
        "production_stops": outcome.stops,
        # production left down for this many later runs of the weekly night (0: started here)
        "production_handed_over": outcome.handed_over,
        "summary": summary_table([a for r in results for a in r.aggregates]),
        "overview": dg.MetadataValue.md("\n".join(md)),
        "engine_build": first.engine_build or "",
        "launch_command": dg.MetadataValue.text(first.launch_command or ""),
        "fingerprint": first.fingerprint,
        **key_figures(results, config.decision.concurrency),
    }


def benchmark_hosts(config: StrixConfig) -> list[str]:
    return [h for h, runs in config.runs.items() if runs] or ["local"]


def benchmark_asset_key(config: StrixConfig, host: str) -> str:
    """`benchmark_run` with one benchmarked host; `benchmark_run_<host>` with several."""
    return "benchmark_run" if len(benchmark_hosts(config)) <= 1 else f"benchmark_run_{host.replace('-', '_')}"


def build_benchmark_assets(config: StrixConfig) -> list[dg.AssetsDefinition]:
    return [build_benchmark_asset(h, benchmark_asset_key(config, h)) for h in benchmark_hosts(config)]
