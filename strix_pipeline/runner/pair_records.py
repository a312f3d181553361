"""The warehouse's rows of a comparison by pairs (warehouse/comparisons.py): one per metric judged, one
per engine start, kept or dropped."""

from __future__ import annotations

import json

from strix_pipeline.runner.pair_model import PairsResult
from strix_pipeline.warehouse.comparisons import ComparisonRecord, ComparisonRun


def requests_per_run(result: PairsResult) -> int | None:
    """The fewest TTFT requests a kept run measured: what its TTFT percentiles are taken over."""
    counts = [
        r.figures.ttft_requests for r in result.runs if r.kept and r.figures and r.figures.ttft_requests
    ]
    return min(counts) if counts else None


def records(result: PairsResult) -> tuple[list[ComparisonRecord], list[ComparisonRun]]:
    """The warehouse's rows of a comparison (warehouse/comparisons.py)."""
    rows = [
        ComparisonRecord(
            comparison_id=result.comparison_id,
            host=result.host,
            engine=result.engine,
            release_a=m.release_a,
            release_b=m.release_b,
            metric=m.metric,
            higher_is_better=m.higher_is_better,
            pairs=m.pairs,
            ratio=m.ratio,
            low=m.low,
            high=m.high,
            verdict=m.verdict,
            looks=m.looks,
            target=m.target,
            alpha=m.alpha,
            look_alpha=m.look_alpha,
            cap=m.cap,
            seed=result.seed,
            values_a=[v.a for v in m.values],
            values_b=[v.b for v in m.values],
            orders=[v.order for v in m.values],
            dropped_pairs=result.dropped_pairs,
            started_at=result.started_at,
            ended_at=result.ended_at,
            estimator=m.estimator,
            primary_metric=m.primary,
            withheld=m.why,
            runs_a=result.failures.n1,
            failed_runs_a=result.failures.k1,
            runs_b=result.failures.n2,
            failed_runs_b=result.failures.k2,
            failure_p=result.failures.p_value,
            fails_more=result.fails_more,
            excluded_a=result.exclusions.k1,
            excluded_b=result.exclusions.k2,
            exclusion_p=result.exclusions.p_value,
            scores_lower=result.scores_lower,
            quality_p=result.quality_b.p_value if result.quality_b is not None else None,
            requests_per_run=requests_per_run(result),
        )
        for m in result.metrics
    ]
    runs = [
        ComparisonRun(
            comparison_id=result.comparison_id,
            run=r.run,
            pair=r.pair,
            side=r.side,
            release=r.release,
            kept=r.kept,
            warmup_ms=r.figures.warmup_ms if r.figures else None,
            figures=json.dumps(r.figures.values, sort_keys=True) if r.figures else None,
            engine_build=r.figures.engine_build if r.figures else None,
            error=r.error,
            started_at=r.started_at,
            ended_at=r.ended_at,
            excluded=r.excluded,
            failure_rate=r.figures.failure_rate if r.figures and not r.excluded else None,
        )
        for r in result.runs
    ]
    return rows, runs
