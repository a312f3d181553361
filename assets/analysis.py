"""Everything computed from the warehouse: the aggregates view, change points, charts, the decision."""

import json
from dataclasses import dataclass

import dagster as dg
import polars as pl

from assets.decision_metadata import answer_metadata, criteria_table
from assets.decision_plots import decision_figures
from assets.resources import StrixConfigResource, WarehouseResource
from strix_pipeline.analysis.bisect.steps import advance_all, plan_bisections, steps_text, summary
from strix_pipeline.analysis.changes import detect_changes, stored_changes
from strix_pipeline.analysis.charts import (
    markdown_image,
    support_matrix_markdown,
    support_matrix_rows,
    write_charts,
)
from strix_pipeline.analysis.decision import (
    decision_markdown,
    evaluate,
    evidence_versions,
    previous_decision,
    wording_of,
)
from strix_pipeline.analysis.notify import notify_changes, regression_alerts
from strix_pipeline.config import StrixConfig
from strix_pipeline.outside_text import markdown_text as _md
from strix_pipeline.planning.targets import canaries
from strix_pipeline.report import write_report
from strix_pipeline.runner.pair_bisect import pairs_rule
from strix_pipeline.warehouse import NoiseRecord, Warehouse
from strix_pipeline.webhook import webhook_url

# each run's memory held after load: C5's ratio in the forest plot
HELD_SQL = "SELECT run_id, held_bytes FROM v_run_base"

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


def _column_type(dtype: pl.DataType) -> str:
    if dtype == pl.Boolean:
        return "bool"
    if dtype.is_integer():
        return "int"
    if dtype.is_numeric():
        return "float"
    return "string"


def _value(v: object, kind: str) -> str | int | float | bool | None:
    if v is None:
        return None
    if kind == "float":
        return round(float(v), 3)  # type: ignore[arg-type]
    if kind in ("int", "bool"):
        return v  # type: ignore[return-value]
    return str(v)


def _table(df: pl.DataFrame, limit: int = 60) -> dg.TableMetadataValue:
    """A polars frame as a Dagster table, typed: numbers stay numbers (None when missing), so the UI
    sorts and aligns them as such; anything else is text."""
    kinds = {c: _column_type(t) for c, t in df.schema.items()}
    cols = [dg.TableColumn(c, kinds[c]) for c in df.columns]
    rows = [
        dg.TableRecord({k: _value(v, kinds[k]) for k, v in rec.items()})
        for rec in df.head(limit).iter_rows(named=True)
    ]
    return dg.MetadataValue.table(rows, schema=dg.TableSchema(cols))


@dg.asset(
    group_name="analysis",
    kinds={"duckdb", "polars"},
    deps=[dg.AssetKey("benchmark_run")],
    automation_condition=EAGER,
    description=(
        "The newest run of each (host, engine, model profile) with its per-scenario, per-level aggregates "
        "(TTFT/TPOT/E2E percentiles with the TTFT p95's distribution-free interval, throughput, goodput, "
        "prefill and decode rates). Every number traces back to raw rows in `requests` by run_id."
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


def _bisection_cell(found: tuple | None) -> str:
    return summary(found[0]) if found else "not bisected"


def bisections_markdown(searches) -> str:
    """Each bisection: the change, the brackets, every step (release, figure, interval, side)."""
    lines = []
    for b, steps in searches:
        lines.append(
            f"- {_md(b.bisection_id)} {_md(b.engine)} on {_md(b.host)} {_md(b.metric)} "
            f"{_md(b.scenario)}@{b.level}, between {_md(b.version_before)} and {_md(b.version_after)}: "
            f"**{_md(b.status)}** — {_md(b.reason or '')}"
        )
        # "N. release: figure -> side": the step's number is the list's, the rest the warehouse's text
        lines += [f"    {n}. {_md(rest)}" for n, _, rest in (s.partition(". ") for s in steps)]
    return "\n".join(lines) or "none"


def noise_markdown(rows: list[NoiseRecord]) -> str:
    """The series' run-to-run noise from the canary (warehouse table noise_figures), as a table."""
    if not rows:
        return "Run-to-run noise: not measured yet (the canary needs three runs of its release)."
    lines = [
        "| host | canary | series | runs | CV | step seen at 3 / 5 / 10 pairs |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {_md(r.host)} | {_md(r.engine)} {_md(r.version)} | "
            f"{_md(r.metric)} · {_md(r.scenario)}@{r.level} | {r.runs} | {r.cv:.1%} | {_md(r.steps_text)} |"
        )
    return "\n".join(lines)


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
        "t-test on weekly means (the runs of one release in one ISO week are one point), at the p-value "
        "and magnitude floor of `[change_detection]` (the values in effect are in each materialisation's "
        "metadata; the floor's noise is the canary's measured CV of one run / sqrt(runs a point) where "
        "the noise table has the series, else the series' own). A change stays provisional until two "
        "runs stand after it (a repeat run or the next version). `strix ack ID --reason` "
        "acknowledges one. A confirmed change with unbenchmarked releases between its two versions is "
        "bisected by bisect_sensor (by pairs where it can: pair_bisect_job; else bisect_job); the canary "
        '(`[analysis] canary`) read over time labels changes of its window "host drift suspected".'
    ),
)
def regressions(strix: StrixConfigResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """One asset for three jobs in one writer's transaction, in their order: advance the bisections
    whose step has landed (so that run stays out of the series), detect the changes, start bisections
    of the confirmed ones. Three assets would split that order over three transactions and rename the
    key the sensors, jobs, checks and tests know."""
    config = strix.get()
    cd = config.change_detection
    with warehouse.writer() as wh:
        tracked = _track_changes(wh, config)
    log = dg.get_dagster_logger()
    for b in tracked.advanced + tracked.started:
        log.info(f"bisection {b.bisection_id} ({b.engine} {b.metric}): {b.status}: {b.reason}")
    by_change = {b.change_id: (b, s) for b, s in tracked.searches.values() if b.change_id}
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": len(tracked.active),
            "detected_now": len(tracked.changes),
            "changes": _changes_table(tracked.active, by_change),
            "bisections": dg.MetadataValue.md(bisections_markdown(tracked.searches.values())),
            "noise": dg.MetadataValue.md(noise_markdown(tracked.noise)),
            "change_detection": (
                f"max p-value {cd.max_pvalue:g}, magnitude floor max({cd.min_magnitude_pct:g} %, "
                f"{cd.noise_multiple:g}x the noise of a weekly mean: measured CV / sqrt(runs), else the "
                "series' own)"
            ),
        },
        check_results=[_no_confirmed_regression(tracked.active, by_change)],
    )


@dataclass(frozen=True)
class _Tracked:
    """What the regressions asset's three jobs did, and what it shows."""

    advanced: list  # bisections a landed step moved on
    changes: list  # the changes detected now
    started: list  # bisections started for confirmed changes
    active: list  # the stored, unacknowledged changes
    searches: dict  # bisection id -> (bisection, its steps' text)
    noise: list[NoiseRecord]


def _track_changes(wh: Warehouse, config: StrixConfig) -> _Tracked:
    # a bisection step whose run has landed is decided first, so that run stays out of the series
    advanced = advance_all(wh, config)
    changes = detect_changes(wh, config, canaries=canaries(config))
    started = plan_bisections(wh, config, changes, by_pairs=pairs_rule(config))
    active = [c for c in stored_changes(wh, include_acknowledged=False)]
    searches = {b.bisection_id: (b, steps_text(wh, b)) for b in wh.list_bisections()}
    return _Tracked(advanced, changes, started, active, searches, wh.latest_noise())


def _changes_table(active: list, by_change: dict) -> dg.TableMetadataValue:
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
                "host_drift": c.host_drift or "",
                "bisection": _bisection_cell(by_change.get(c.change_id)),
            }
        )
        for c in active
    ]
    return dg.MetadataValue.table(
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
                dg.TableColumn(
                    "host_drift", "string", description="why the host is suspected, not the engine"
                ),
                dg.TableColumn(
                    "bisection",
                    "string",
                    description="the first release that shows it, or how far the search got",
                ),
            ]
        ),
    )


def _no_confirmed_regression(active: list, by_change: dict) -> dg.AssetCheckResult:
    confirmed_bad = [c for c in active if c.is_confirmed_regression]
    return dg.AssetCheckResult(
        check_name="no_confirmed_regression",
        passed=not confirmed_bad,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "confirmed_regressions": dg.MetadataValue.md(
                "\n".join(
                    f"- {_md(c.change_id)} {_md(c.engine)} {_md(c.metric)} {_md(c.scenario)}@{c.level}: "
                    f"{_md(c.version_before)} → {_md(c.version_after)} ({c.magnitude_pct:+.1f} %); "
                    + _md(_bisection_cell(by_change.get(c.change_id)))
                    for c in confirmed_bad
                )
                or "none"
            )
        },
    )


@dg.asset(
    group_name="analysis",
    kinds={"altair"},
    deps=[run_aggregates, regressions],
    automation_condition=EAGER,
    description=(
        "Trend charts (Altair -> HTML, PNG and Vega-Lite JSON under artifacts/charts, with an index.html): "
        "TTFT p95 at 5 clients by image version (CI error bars, failures marked, change points), output "
        "throughput vs concurrency, prefill tok/s vs input length, held memory, decision timeline, and the "
        "support matrix (engine × image version × model profile -> serves / starts / fails with the reason "
        "and run id, newest versions first; `support_matrix` here, view v_support_matrix), C3's metric of "
        "baseline and candidate on one time axis with the verdicts, and each version's share of the "
        "memory-bandwidth limit (decode efficiency)."
    ),
)
def trend_charts(strix: StrixConfigResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    config = strix.get()
    out = config.artifacts_dir() / "charts"
    with warehouse.reader() as wh:
        roles = {name: e.role for name, e in config.engines.items() if e.role != "tracked"}
        cs = write_charts(wh, out, roles=roles)
        matrix = support_matrix_rows(wh)
    md = [f"Open `{cs.index_html}` for the interactive charts.", ""]
    for name, files in cs.charts.items():
        md += [f"### {name}", _md(files.note or ""), markdown_image(files.png, max_width=560), ""]
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": len(cs.charts),
            "index": dg.MetadataValue.path(str(cs.index_html)),
            "support_matrix": dg.MetadataValue.md(support_matrix_markdown(matrix)),
            "charts": dg.MetadataValue.md("\n".join(md)),
        }
    )


@dg.asset(
    group_name="decision",
    kinds={"duckdb"},
    # and the decision's match-ups by interleaved runs, when host local has compared them (C3 decides on them)
    deps=[run_aggregates, regressions, "engine_comparison"],
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
        "Is it time to switch the Box from llama-server to vLLM? `sentence`: the answer in one sentence (the "
        "verdict, the criterion that decided it with its figure and interval, what would change it; the "
        "weekly report's, its feed's and the webhook's too). The five criteria (C1 official image "
        "starts, C2 serves the medium MoE, C3 TTFT p95 at 5 clients beats llama-server, C4 serves "
        "gpt-oss-120b MXFP4, C5 memory not above llama-server; and C6, goodput within the owner's SLOs, "
        "when [decision.slo] sets them) with value, threshold, CI, evidence run ids and digests. "
        "Verdict switch / evaluate / stay / unknown; never a silent pass or fail. "
        "Numeric metadata for the plots: `verdict_score` switch=3, evaluate=2, stay=1, unknown=0; "
        "per figure, its unit in its name, the baseline's and the candidate's side by side and their "
        "ratio (C3's TTFT p95 and output at `decision concurrency (clients)`, C5's memory held after "
        "load in GiB): `C3 TTFT p95 at 5 clients (ms) · baseline`, `… · candidate`, `ratio · C3 TTFT "
        "p95 at 5 clients, candidate / baseline (×)`; a figure without evidence is absent. "
        "The sentence opens with the plain answer: Switch (switch), Not yet (evaluate), Stay (stay), Can't "
        "tell yet (unknown). Words (each criterion, the two match-ups, held, fingerprint, canary, each "
        "verdict): docs/glossary.md, and the report's glossary page."
    ),
)
def switch_decision(strix: StrixConfigResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    config = strix.get()
    with warehouse.writer() as wh:
        previous = previous_decision(wh, config.decision.host)
        decision = evaluate(wh, config)
        wh.save_decision(decision.criteria)
        changes = regression_alerts(wh, previous, decision)  # confirmed since `previous`: alerted
        n_history = wh.count("decisions")
        figures = decision_figures(wh, decision, config.decision.concurrency)
        # the week's answer in one sentence: the same as the report's, the feed's and the webhook's
        wording = wording_of(config, decision, evidence_versions(wh, decision))
        held = {r["run_id"]: r["held_bytes"] for r in wh.query_df(HELD_SQL).iter_rows(named=True)}
    # the plain answer first, then the deciding figure, what would change it and the forest plot
    answer = answer_metadata(decision, wording, held, config.artifacts_dir())
    sentence = str(answer["sentence"])
    notified = notify_changes(previous, decision, changes, webhook_url(config), wording=wording)
    out = config.artifacts_dir() / "decision.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(decision.to_json(), indent=2))
    unknown = decision.without_fresh_evidence(config.decision.required)
    changed = decision.verdict_changed
    return dg.MaterializeResult(
        metadata={
            **answer,
            "verdict": decision.label,
            "reason": decision.reason,
            "decision": dg.MetadataValue.md(f"{sentence}\n\n{decision_markdown(decision)}"),
            "evaluation_id": decision.evaluation_id,
            "dagster/row_count": n_history,
            "webhook_sent": notified,
            "json": dg.MetadataValue.path(str(out)),
            # a table the UI shows as one (figures rounded, no machine path), not JSON behind a button
            "criteria": criteria_table(decision, wording),
            **figures,
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="evidence_fresh",
                passed=not unknown,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "without_fresh_evidence": dg.MetadataValue.md(
                        "\n".join(f"- {c.criterion} {c.name}: {_md(c.reason)}" for c in unknown) or "none"
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


@dg.asset(
    group_name="decision",
    kinds={"html"},
    deps=[trend_charts, switch_decision],
    automation_condition=EAGER,
    description=(
        "The weekly report: a static site under artifacts/report (index.html: the verdict and what changed "
        "since the last report, the trend charts, the support matrix, the latest figures per engine with "
        "intervals; a page per run; an Atom feed.xml of verdict changes, confirmed regressions and new "
        "support-matrix cells; glossary.html, linked from every page). Self-contained: it opens from a "
        "file. `strix report --out DIR` writes the same."
    ),
)
def weekly_report(strix: StrixConfigResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    config = strix.get()
    with warehouse.reader() as wh:
        site = write_report(wh, config, config.artifacts_dir() / "report")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": site.run_pages,
            "index": dg.MetadataValue.path(str(site.index)),
            "feed": dg.MetadataValue.path(str(site.feed)),
            "verdict": site.verdict or "no evaluation yet",
            "feed_entries": len(site.entries),
            "new_feed_entries": dg.MetadataValue.md(
                "\n".join(f"- {_md(e.title)}" for e in site.new_entries) or "none"
            ),
        }
    )
