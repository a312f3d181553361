"""`benchmark_run`: the standard suite for one image version on its host, loaded into the warehouse."""

import dagster as dg

from assets.partitions import image_versions
from assets.resources import HostAccessResource, StrixConfigResource, WarehouseResource
from strix_pipeline import plan
from strix_pipeline.benchmark import run_benchmark
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import LevelAggregate, RunResult
from strix_pipeline.run_checks import completeness, memory_back, served

COMPLETENESS = "benchmark_complete"
ENGINE_SERVED = "engine_served"
MEMORY_RETURNED = "memory_back_at_baseline"
PRODUCTION_RESTORED = "production_restored"


def host_pool(host: str) -> str:
    """The concurrency pool of a host: one engine at a time shares its unified memory."""
    return f"host_{host}".replace("-", "_")


def _fmt(v: float | None, digits: int = 1) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def summary_table(aggs: list[LevelAggregate]) -> dg.TableMetadataValue:
    cols = [
        ("run_id", "string"),
        ("scenario", "string"),
        ("level", "int"),
        ("ok", "int"),
        ("failed", "int"),
        ("ttft_p50_ms", "string"),
        ("ttft_p95_ms", "string"),
        ("tpot_p50_ms", "string"),
        ("e2e_p95_ms", "string"),
        ("output_tok_s", "string"),
        ("prefill_tok_s", "string"),
    ]
    rows = [
        dg.TableRecord(
            {
                "run_id": a.run_id[-6:],
                "scenario": a.scenario,
                "level": a.level,
                "ok": a.requests_ok,
                "failed": a.requests_failed,
                "ttft_p50_ms": _fmt(a.ttft_p50_ms),
                "ttft_p95_ms": _fmt(a.ttft_p95_ms),
                "tpot_p50_ms": _fmt(a.tpot_p50_ms, 2),
                "e2e_p95_ms": _fmt(a.e2e_p95_ms),
                "output_tok_s": _fmt(a.output_tokens_per_s),
                "prefill_tok_s": _fmt(a.prefill_tokens_per_s),
            }
        )
        for a in aggs
    ]
    return dg.MetadataValue.table(rows, schema=dg.TableSchema([dg.TableColumn(n, t) for n, t in cols]))


class BenchmarkRunConfig(dg.Config):
    """Set in the launchpad: a manual run outside the host's maintenance window must say so."""

    force: bool = False


def build_benchmark_asset(host: str, key: str = "benchmark_run") -> dg.AssetsDefinition:
    @dg.asset(
        name=key,
        partitions_def=image_versions,
        pool=host_pool(host),
        group_name="benchmark",
        kinds={"duckdb", "docker"} if host != "local" else {"duckdb", "python"},
        deps=["engine_images"],
        check_specs=[
            dg.AssetCheckSpec(ENGINE_SERVED, asset=key, description="the engine started and served measured requests (a run that measured nothing fails here, with its reason)"),
            dg.AssetCheckSpec(COMPLETENESS, asset=key, description="every level has its requests or a recorded failure"),
            dg.AssetCheckSpec(MEMORY_RETURNED, asset=key, description="memory returned to the idle baseline after the engine stopped"),
            dg.AssetCheckSpec(PRODUCTION_RESTORED, asset=key, description="the host's production engine is running and healthy again after the benchmark"),
        ],
        tags={"strix/host": host},
        description=(
            f"The standard suite (smoke, concurrency sweep, prefill ladder, decode, prefix cache, memory) for one "
            f"image version on host `{host}`, for every model profile configured for that engine there; raw "
            "requests, aggregates, memory samples and server metrics loaded into the warehouse in one "
            "transaction per run. A run's id derives from the Dagster run, so re-executing that Dagster run "
            "replaces its rows while a new materialisation of the partition adds a repeat run (the evidence "
            "that confirms a provisional change). Failures are stored as runs with their reason. Runs in pool `{host_pool(host)}` (limit 1): one engine at a time per host."
        ),
    )  # fmt: skip
    def _asset(
        context: dg.AssetExecutionContext,
        config: BenchmarkRunConfig,
        strix: StrixConfigResource,
        warehouse: WarehouseResource,
        host_access: HostAccessResource,
    ) -> dg.MaterializeResult:
        run_config, config = config, strix.get()
        pkey = context.partition_key
        with warehouse.reader() as wh:
            image = plan.find_image(wh.known_images(plan.parse_partition_key(pkey).engine), pkey)
        if image is None:
            raise dg.Failure(f"no known image for partition {pkey}; materialise engine_images first")
        targets = [t for t in plan.targets_for(config, image) if t.host == host]
        if not targets:
            raise dg.Failure(f"{pkey}: engine {image.engine} is not configured to run on host {host}")
        results: list[RunResult] = []
        for target in targets:
            run_id = f"{target.host}-{target.engine}-{target.model}-{context.run_id[:8]}"
            result = run_benchmark(
                config,
                target,
                run_id=run_id,
                dagster_run_id=context.run_id,
                log=context.log.info,
                force=run_config.force,
            )
            with warehouse.writer() as wh:
                wh.upsert_host(host, config.hosts[host].kind, config.hosts[host].description)
                wh.load_run(result)
            context.log.info(
                f"loaded run {result.run.run_id}: {result.run.status}, {len(result.requests)} requests, "
                f"{len(result.aggregates)} aggregates, {len(result.memory)} memory samples"
            )
            results.append(result)
        checks = []
        served_by = [(r, *served(r)) for r in results]
        for r, ok, why in served_by:
            if not ok:
                context.log.error(
                    f"run {r.run.run_id} measured nothing: {why} (logs: {config.artifacts_dir() / 'logs' / r.run.run_id})"
                )
        checks.append(
            dg.AssetCheckResult(
                check_name=ENGINE_SERVED,
                passed=all(ok for _, ok, _ in served_by),
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={
                    "detail": dg.MetadataValue.md(
                        "\n".join(f"- `{r.run.run_id}`: {why}" for r, _, why in served_by)
                    )
                },
            )
        )
        comp = [completeness(config, r) for r in results]
        checks.append(
            dg.AssetCheckResult(
                check_name=COMPLETENESS,
                passed=all(ok for ok, _ in comp),
                metadata={"detail": dg.MetadataValue.md("\n".join(f"- {m}" for _, m in comp))},
            )
        )
        mem = [(r.run.run_id, *memory_back(r)) for r in results]
        checks.append(
            dg.AssetCheckResult(
                check_name=MEMORY_RETURNED,
                passed=all(ok for _, ok, _ in mem),
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "detail": dg.MetadataValue.md("\n".join(f"- `{rid}`: {why}" for rid, _, why in mem))
                },
            )
        )
        broken = [r for r in results if r.production_restored is False]
        checks.append(
            dg.AssetCheckResult(
                check_name=PRODUCTION_RESTORED,
                passed=not broken,
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={
                    "detail": dg.MetadataValue.md(
                        "\n".join(f"- `{r.run.run_id}`: {r.run.failure_reason}" for r in broken)
                        or "production restored (or none configured on this host)"
                    )
                },
            )
        )
        if broken:
            context.log.error(
                f"PRODUCTION NOT RESTORED on host {host}: the next run refuses to start until it is healthy"
            )
        statuses = {r.run.run_id: r.run.status for r in results}
        all_aggs = [a for r in results for a in r.aggregates]
        first = results[0].run
        md = [
            f"**{image.engine}** `{image.registry}/{image.repository}:{image.tag}` `{image.digest[:19]}` on `{host}`",
            "",
            *[
                f"- run `{r.run.run_id}`: **{r.run.status}**"
                + (f" — {r.run.failure_reason}" if r.run.failure_reason else "")
                + (
                    f"; held memory {r.run.held_bytes / 2**20:.0f} MiB"
                    if r.run.held_bytes is not None
                    else ""
                )
                for r in results
            ],
        ]
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": sum(len(r.requests) for r in results),
                "runs": dg.MetadataValue.json(statuses),
                "summary": summary_table(all_aggs),
                "overview": dg.MetadataValue.md("\n".join(md)),
                "engine_build": first.engine_build or "",
                "launch_command": dg.MetadataValue.text(first.launch_command or ""),
                "fingerprint": first.fingerprint,
            },
            check_results=checks,
        )

    return _asset


def benchmark_hosts(config: StrixConfig) -> list[str]:
    return [h for h, runs in config.runs.items() if runs] or ["local"]


def benchmark_asset_key(config: StrixConfig, host: str) -> str:
    """`benchmark_run` with one benchmarked host; `benchmark_run_<host>` with several."""
    return "benchmark_run" if len(benchmark_hosts(config)) <= 1 else f"benchmark_run_{host.replace('-', '_')}"


def build_benchmark_assets(config: StrixConfig) -> list[dg.AssetsDefinition]:
    return [build_benchmark_asset(h, benchmark_asset_key(config, h)) for h in benchmark_hosts(config)]
