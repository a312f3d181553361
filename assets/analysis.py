"""Everything computed from the warehouse: the aggregates view, change points, charts, the decision."""

import json

import dagster as dg
import polars as pl

from assets.resources import StrixConfigResource, WarehouseResource
from strix_pipeline.analysis.changepoints import detect_changes, stored_changes
from strix_pipeline.analysis.charts import markdown_image, write_charts
from strix_pipeline.analysis.decision import decision_markdown, evaluate, previous_decision
from strix_pipeline.analysis.notify import notify_changes, webhook_url

# Like eager(), but not blocked by image versions that were never benchmarked (missing partitions).
EAGER = (
    (dg.AutomationCondition.newly_missing() | dg.AutomationCondition.any_deps_updated()).since_last_handled()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label("after new results")

# The newest run of each (host, engine, model profile) and its aggregates: what "now" looks like
# (the read model's v_latest_run: failed runs included, so a broken engine shows as broken).
LATEST_AGGREGATES_SQL = """
SELECT l.host, l.engine, l.image_version AS version, l.model_profile,
       l.status, a.scenario, a.level, a.requests_ok, a.requests_failed,
       a.ttft_p50_ms, a.ttft_p95_ms, a.ttft_p95_ci_low_ms, a.ttft_p95_ci_high_ms,
       a.tpot_p50_ms, a.itl_p50_ms, a.e2e_p95_ms, a.output_tokens_per_s, a.requests_per_s,
       a.goodput_requests_per_s, a.prefill_tokens_per_s, a.decode_tokens_per_s, a.cached_tokens_mean,
       l.run_id, l.started_at
FROM v_latest_run l LEFT JOIN aggregates a USING (run_id)
ORDER BY l.host, l.engine, l.model_profile, a.scenario, a.level
"""


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def _table(df: pl.DataFrame, limit: int = 60) -> dg.TableMetadataValue:
    """A polars frame as a Dagster table (strings: the UI shows them as the numbers they are)."""
    cols = [dg.TableColumn(c, "string") for c in df.columns]
    rows = [
        dg.TableRecord({k: _cell(v) for k, v in rec.items()}) for rec in df.head(limit).iter_rows(named=True)
    ]
    return dg.MetadataValue.table(rows, schema=dg.TableSchema(cols))


@dg.asset(
    group_name="analysis",
    kinds={"duckdb", "polars"},
    deps=[dg.AssetKey("benchmark_run")],
    automation_condition=EAGER,
    description=(
        "The newest run of each (host, engine, model profile) with its per-scenario, per-level aggregates "
        "(TTFT/TPOT/E2E percentiles with the TTFT p95 bootstrap CI, throughput, goodput, prefill and "
        "decode rates). Every number traces back to raw rows in `requests` by run_id."
    ),
)
def run_aggregates(warehouse: WarehouseResource) -> dg.MaterializeResult:
    with warehouse.reader() as wh:
        df = wh.query_df(LATEST_AGGREGATES_SQL)
        n_runs = wh.count("runs")
        n_requests = wh.count("requests")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": df.height,
            "runs_in_warehouse": n_runs,
            "requests_in_warehouse": n_requests,
            "latest": _table(df.drop(["run_id", "started_at"])),
        }
    )


@dg.asset(
    group_name="analysis",
    kinds={"duckdb"},
    deps=[run_aggregates],
    automation_condition=EAGER,
    check_specs=[
        dg.AssetCheckSpec(
            "no_confirmed_regression",
            asset="regressions",
            description="WARN when a confirmed, unacknowledged regression exists",
        )
    ],
    description=(
        "Change points per series (one fingerprint, sorted by image version): E-divisive means with a "
        "t-test, max p-value 0.001, magnitude floor max(2 %, 3x noise). A change on the newest version "
        "stays provisional until a repeat run or the next version agrees. `strix ack ID --reason` "
        "acknowledges one."
    ),
)
def regressions(strix: StrixConfigResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    config = strix.get()
    with warehouse.writer() as wh:
        changes = detect_changes(wh, config)
        active = [c for c in stored_changes(wh, include_acknowledged=False)]
    confirmed_bad = [c for c in active if c.is_confirmed_regression]
    rows = [
        dg.TableRecord(
            {
                "id": c.change_id,
                "engine": c.engine,
                "metric": c.metric,
                "scenario": f"{c.scenario}@{c.level}",
                "from": c.version_before,
                "to": c.version_after,
                "change_pct": round(c.magnitude_pct, 1),
                "status": c.status,
                "regression": c.is_regression,
            }
        )
        for c in active
    ]
    table = dg.MetadataValue.table(
        rows,
        schema=dg.TableSchema(
            [
                dg.TableColumn("id", "string"),
                dg.TableColumn("engine", "string"),
                dg.TableColumn("metric", "string"),
                dg.TableColumn("scenario", "string"),
                dg.TableColumn("from", "string"),
                dg.TableColumn("to", "string"),
                dg.TableColumn("change_pct", "float"),
                dg.TableColumn("status", "string"),
                dg.TableColumn("regression", "bool"),
            ]
        ),
    )
    return dg.MaterializeResult(
        metadata={"dagster/row_count": len(active), "detected_now": len(changes), "changes": table},
        check_results=[
            dg.AssetCheckResult(
                check_name="no_confirmed_regression",
                passed=not confirmed_bad,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "confirmed_regressions": dg.MetadataValue.md(
                        "\n".join(
                            f"- `{c.change_id}` {c.engine} {c.metric} {c.scenario}@{c.level}: "
                            f"{c.version_before} → {c.version_after} ({c.magnitude_pct:+.1f} %)"
                            for c in confirmed_bad
                        )
                        or "none"
                    )
                },
            )
        ],
    )


@dg.asset(
    group_name="analysis",
    kinds={"altair"},
    deps=[run_aggregates, regressions],
    automation_condition=EAGER,
    description=(
        "Trend charts (Altair -> HTML, PNG and Vega-Lite JSON under artifacts/charts, with an index.html): "
        "TTFT p95 at 5 clients by image version (CI error bars, failures marked, change points), output "
        "throughput vs concurrency, prefill tok/s vs input length, held memory, decision timeline."
    ),
)
def trend_charts(strix: StrixConfigResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    config = strix.get()
    out = config.artifacts_dir() / "charts"
    with warehouse.reader() as wh:
        cs = write_charts(wh, out)
    md = [f"Open `{cs.index_html}` for the interactive charts.", ""]
    for name, files in cs.charts.items():
        md += [f"### {name}", files.note or "", markdown_image(files.png, max_width=560), ""]
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": len(cs.charts),
            "index": dg.MetadataValue.path(str(cs.index_html)),
            "charts": dg.MetadataValue.md("\n".join(md)),
        }
    )


@dg.asset(
    group_name="decision",
    kinds={"duckdb"},
    deps=[run_aggregates, regressions],
    automation_condition=EAGER,
    check_specs=[
        dg.AssetCheckSpec(
            "evidence_fresh",
            asset="switch_decision",
            description="every required criterion has evidence inside the freshness window",
        ),
        dg.AssetCheckSpec(
            "verdict_unchanged", asset="switch_decision", description="WARN when the verdict changed"
        ),
    ],
    description=(
        "Is it time to switch the Box from llama-server to vLLM? The five criteria (C1 official image "
        "starts, C2 serves the medium MoE, C3 TTFT p95 at 5 clients beats llama-server, C4 serves "
        "gpt-oss-120b MXFP4, C5 memory not above llama-server) with value, threshold, CI, evidence run "
        "ids and digests. Verdict switch / evaluate / stay / unknown; never a silent pass or fail."
    ),
)
def switch_decision(strix: StrixConfigResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    config = strix.get()
    with warehouse.writer() as wh:
        previous = previous_decision(wh, config.decision.host)
        decision = evaluate(wh, config)
        wh.save_decision(decision.criteria)
        changes = stored_changes(wh, include_acknowledged=False)
        n_history = wh.count("decisions")
    notified = notify_changes(previous, decision, changes, webhook_url(config))
    out = config.artifacts_dir() / "decision.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(decision.to_json(), indent=2))
    unknown = decision.without_fresh_evidence(config.decision.required)
    changed = decision.verdict_changed
    return dg.MaterializeResult(
        metadata={
            "verdict": decision.verdict,
            "reason": decision.reason,
            "decision": dg.MetadataValue.md(decision_markdown(decision)),
            "evaluation_id": decision.evaluation_id,
            "dagster/row_count": n_history,
            "webhook_sent": notified,
            "json": dg.MetadataValue.path(str(out)),
            "criteria": dg.MetadataValue.json(
                {c.criterion: {"status": c.status, "reason": c.reason} for c in decision.criteria}
            ),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="evidence_fresh",
                passed=not unknown,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "without_fresh_evidence": dg.MetadataValue.md(
                        "\n".join(f"- {c.criterion} {c.name}: {c.reason}" for c in unknown) or "none"
                    )
                },
            ),
            dg.AssetCheckResult(
                check_name="verdict_unchanged",
                passed=not changed,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "previous": previous.verdict if previous else "none",
                    "current": decision.verdict,
                    "changed_criteria": json.dumps(decision.changed_criteria()),
                },
            ),
        ],
    )
