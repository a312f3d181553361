"""The site's index as HTML text: the week's answer in one sentence, the verdict with its criteria and
their comparisons drawn, news, charts, matrix, latest figures. Every value from the warehouse passes
through :func:`esc`; every link is a file of the site. One run's page is :mod:`.run_detail`'s."""

from __future__ import annotations

from typing import Any

from strix_pipeline.analysis.changepoints import Change
from strix_pipeline.analysis.charts.marks import is_note_chart
from strix_pipeline.analysis.charts.page import csp_hash, vega_bundle
from strix_pipeline.analysis.decision import (
    Decision,
    criterion_title,
    engine_name,
    format_value,
    matchup_rows,
)
from strix_pipeline.records import CriterionResult
from strix_pipeline.report.answer import answer_html
from strix_pipeline.report.bench_table import bench_html
from strix_pipeline.report.charts import BOOT_JS, ReportChart
from strix_pipeline.report.markup import esc, link, local_time, memory, number, page, table
from strix_pipeline.report.names import FEED, GLOSSARY, run_page
from strix_pipeline.report.page_parts import figure, or_none, run_link, when_text
from strix_pipeline.report.side_by_side import decision_pair, side_by_side_html
from strix_pipeline.report.since import Since
from strix_pipeline.report.site_data import ReportData
from strix_pipeline.report.workload import percentile_text

MATRIX_WORDS = {
    "serves": "serves",
    "starts": "starts, does not serve",
    "fails": "fails",
    "not_run": "not run",
}


def index_csp() -> str:
    # only the page's two scripts run; Vega compiles its expressions with Function(): 'unsafe-eval'
    return (
        f"default-src 'none'; script-src {csp_hash(vega_bundle())} {csp_hash(BOOT_JS)} 'unsafe-eval'; "
        "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    )


# ---- index ---------------------------------------------------------------------------------------


def _digest(d: str | None) -> str:
    """``cfa440166137``: enough of a digest to tell two apart (the run's page has it whole)."""
    return (d or "").split(":")[-1][:12]


def _evidence_link(data: ReportData, run_id: str) -> str:
    """A run the criterion cites as a short link: engine, version and digest; its id in the title."""
    r = data.run(run_id)
    if r is None:  # a run this warehouse no longer holds: named, not linked
        return f"<span class='muted'>{esc(run_id)}</span>"
    text = f"{engine_name(r['engine'])} {r['image_version'] or ''}".strip()
    digest = f" · {_digest(r['image_digest'])}" if r["image_digest"] else ""
    return (
        f"<a href='{esc(run_page(run_id))}' title='run {esc(run_id)}, image {esc(r['image_digest'])}'>"
        f"{esc(text + digest)}</a>"
    )


CRITERIA_COLUMNS = ("criterion", "status", "figure", "threshold", "95 % interval", "reason", "evidence")


def _criterion_row(data: ReportData, c: CriterionResult) -> str:
    """One criterion: a table row on a wide screen, a card on a narrow one (each cell labelled)."""
    interval = (
        f"{format_value(c.ci_low, c.unit)} – {format_value(c.ci_high, c.unit)}"
        if c.ci_low is not None and c.ci_high is not None
        else "–"
    )
    held = (
        f"<br><span class='muted'>held since {when_text(data, c.first_held_at, '%Y-%m-%d')}</span>"
        if c.first_held_at
        else ""
    )
    evidence = "<br>".join(_evidence_link(data, r) for r in c.evidence_run_ids) or "–"
    cells = [
        f"<strong>{esc(c.criterion)}</strong> {esc(criterion_title(c.criterion, data.wording))}"
        f"<br><span class='muted'><code>{esc(c.name)}</code> · "
        f"{'required' if c.required else 'not required'}</span>{held}",
        f"<strong class='status'>{esc(c.status)}</strong>",
        f"<strong>{esc(format_value(c.value, c.unit))}</strong>",
        esc(format_value(c.threshold, c.unit)),
        esc(interval),
        esc(c.reason),
        evidence,
    ]
    tds = "".join(
        f"<td data-label='{esc(label)}' class='c-{i}'>{cell}</td>"
        for i, (label, cell) in enumerate(zip(CRITERIA_COLUMNS, cells, strict=True))
    )
    return f"<tr class='criterion status-{esc(c.status)}' data-criterion='{esc(c.criterion)}'>{tds}</tr>"


def _criteria(data: ReportData, d: Decision) -> str:
    head = "".join(f"<th scope='col' class='c-{i}'>{esc(h)}</th>" for i, h in enumerate(CRITERIA_COLUMNS))
    rows = "".join(_criterion_row(data, c) for c in d.criteria)
    return f"<table class='criteria'><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


MATCHUP_COLUMNS = ["criterion", "match-up", "status", "value", "95 % interval", "runs"]


def _matchups(data: ReportData, d: Decision) -> str:
    """C3 and C5 on both match-ups, the deciding one marked: the engine's effect (equal weights) beside
    the deployment's (each engine's production format). Laid out as the criteria are: a table on a
    wide screen, a labelled card per row on a phone (nothing scrolls sideways)."""
    rows = []
    for p in matchup_rows(d):
        cells = [
            esc(p.criterion),
            esc(p.label) + (" <strong>(decides)</strong>" if p.decides else ""),
            f"<strong class='status'>{esc(p.status)}</strong>",
            esc(format_value(p.value, p.unit)),
            esc(p.interval),
            " vs ".join(run_link(data, r) for r in p.run_ids) or "–",
        ]
        tds = "".join(
            f"<td data-label='{esc(label)}'>{cell}</td>"
            for label, cell in zip(MATCHUP_COLUMNS, cells, strict=True)
        )
        rows.append(f"<tr class='matchup status-{esc(p.status)}'>{tds}</tr>")
    if not rows:
        return ""
    head = "".join(f"<th scope='col'>{esc(h)}</th>" for h in MATCHUP_COLUMNS)
    return (
        "<h3 id='matchups'>C3 and C5 on both match-ups</h3><p class='muted'>production: each engine in its "
        "production format; equal weights: the baseline serving the candidate's own weights.</p>"
        f"<table class='criteria matchups'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _side_by_side(data: ReportData) -> str:
    """The two engines per metric, then llama-bench's prefill/decode table of the same two runs."""
    html = side_by_side_html(data)
    pair = decision_pair(data)
    bench = bench_html(data, list(pair)) if pair else ""
    if bench:
        html = (
            html.removesuffix("</section>") + bench + "</section>" if html else f"<section>{bench}</section>"
        )
    return html


def _verdict(data: ReportData) -> str:
    d = data.decision
    if d is None:
        return (
            "<section id='verdict' aria-labelledby='verdict-h'><h2 id='verdict-h'>Verdict</h2>"
            f"<p class='verdict'>No evaluation of host {esc(data.host)} yet: "
            "<strong>unknown</strong></p></section>"
        )
    return (
        "<section id='verdict' aria-labelledby='verdict-h'><h2 id='verdict-h'>Verdict</h2>"
        f"<p class='verdict'>Verdict on host {esc(d.host)}: <strong "
        f"id='verdict-value'>{esc(d.label)}</strong>"
        "<br><span class='muted'>evaluated <time id='verdict-date' "
        f"datetime='{esc(d.evaluated_at.isoformat())}'>"
        f"{when_text(data, d.evaluated_at)}</time> · evaluation {esc(d.evaluation_id)}</span></p>"
        + (f"<p>{esc(d.reason)}</p>" if d.reason else "")
        + "<h3>The five criteria</h3>"
        + _criteria(data, d)
        + _matchups(data, d)
        + "</section>"
    )


def _change_rows(data: ReportData, changes: list[Change]) -> str:
    rows = []
    for c in changes:
        x = data.extras.get(c.change_id)
        rows.append(
            [
                esc(c.engine),
                esc(c.host),
                esc(f"{c.metric} · {c.scenario} at {c.level}")
                # the canary moved in the same window: said beside the engine's change, never instead
                + (
                    f"<br><span class='muted'>beside it: {esc(c.canary_moved)}</span>"
                    if c.canary_moved
                    else ""
                ),
                esc(f"{c.version_before} → {c.version_after}"),
                esc(f"{c.magnitude_pct:+.1f} %") if c.magnitude_pct is not None else "–",
                esc(x.bisection_text) if x else "not bisected",
                run_link(data, c.run_id_after) if c.run_id_after else esc(c.change_id),
            ]
        )
    head = ["engine", "host", "metric", "versions", "change", "first release showing it", "run / change"]
    return or_none(changes, table(head, rows, numeric={4}))


def _run_rows(data: ReportData, runs: list[dict[str, Any]], *, reason: bool) -> list[list[str]]:
    out = []
    for r in runs:
        row = [
            run_link(data, r["run_id"]),
            esc(r["engine"]),
            esc(r["image_version"]),
            esc(r["host"]),
            esc(r["model_profile"]),
            esc(r["status"]),
            when_text(data, r["started_at"]),
        ]
        if reason:
            row.append(esc(r["failure_reason"] or "no reason recorded"))
        out.append(row)
    return out


def _news(data: ReportData, since: Since) -> str:
    d = data.decision
    if d is None:
        verdict = "no evaluation yet"
    elif since.verdict_before is None:
        verdict = f"first verdict: <strong>{esc(d.label)}</strong>"
    elif since.verdict_before != d.label:
        verdict = (
            f"<strong>changed</strong> from {esc(since.verdict_before)} to <strong>{esc(d.label)}</strong>"
        )
    else:
        verdict = f"unchanged: {esc(d.label)}"
    criteria = or_none(
        since.criteria_changed,
        "<ul>"
        + "".join(f"<li>{esc(c)}: {esc(a)} → {esc(b)}</li>" for c, a, b in since.criteria_changed)
        + "</ul>",
    )
    run_head = ["run", "engine", "version", "host", "model profile", "status", "started"]
    drift = or_none(
        since.drift,
        "<ul>"
        + "".join(
            f"<li>{esc(c.engine)} {esc(c.metric)} {esc(c.version_before)} → {esc(c.version_after)}: "
            f"{esc(data.extras[c.change_id].host_drift)}</li>"
            for c in since.drift
        )
        + "</ul>",
    )
    return (
        "<section id='changes' aria-labelledby='changes-h'>"
        f"<h2 id='changes-h'>What changed {esc(since.label)}</h2>"
        f"<p>Verdict: {verdict}</p>"
        f"<h3>Criteria that changed</h3>{criteria}"
        "<h3>New versions benchmarked</h3>"
        + or_none(since.new_versions, table(run_head, _run_rows(data, since.new_versions, reason=False)))
        + "<h3>Regressions (confirmed)</h3>"
        + _change_rows(data, since.regressions)
        + "<h3>Improvements (confirmed)</h3>"
        + _change_rows(data, since.improvements)
        + f"<h3>Host drift flagged by the canary</h3>{drift}"
        + "<h3>Runs that failed, and why</h3>"
        + or_none(
            since.failed_runs, table([*run_head, "why"], _run_rows(data, since.failed_runs, reason=True))
        )
        + "</section>"
    )


def _trends(data: ReportData, charts: list[ReportChart]) -> str:
    parts = [
        "<section id='trends' aria-labelledby='trends-h'><h2 id='trends-h'>Trends</h2>",
        "<p class='muted'>Each point opens its run's page; the table under the charts gives the "
        "same runs as text.</p>",
    ]
    for c in charts:
        note = f"<p class='muted'>{esc(c.note)}</p>" if c.note else ""
        # a chart with nothing to draw is its note alone: never an empty panel
        drawn = "" if is_note_chart(c.spec) else c.html()
        parts.append(f"<div class='chart'><h3 id='{esc(c.name)}'>{esc(c.title)}</h3>{note}{drawn}</div>")
    level = data.concurrency
    rows = []
    for r in reversed(data.runs):
        f = figure(data, r["run_id"], "concurrency_sweep", level)
        rows.append(
            [
                run_link(data, r["run_id"]),
                esc(r["engine"]),
                esc(r["image_version"]),
                esc(r["host"]),
                esc(r["model_profile"]),
                esc(r["status"]),
                esc(
                    percentile_text(
                        f["ttft_p95_ms"],
                        95,
                        f["requests_ok"],
                        "ms",
                        f["ttft_p95_ci_low_ms"],
                        f["ttft_p95_ci_high_ms"],
                    )
                )
                if f
                else "–",
                esc(number(f["output_tokens_per_s"], "tok/s")) if f else "–",
                esc(memory(r["held_bytes"])),
            ]
        )
    parts.append(
        "<details><summary>Every run as a table</summary>"
        + table(
            [
                "run",
                "engine",
                "version",
                "host",
                "model profile",
                "status",
                f"TTFT p95 at {level} clients",
                f"output at {level} clients",
                "memory held",
            ],
            rows,
            numeric={6, 7, 8},
        )
        + "</details></section>"
    )
    return "".join(parts)


def _matrix(data: ReportData) -> str:
    parts = [
        "<section id='matrix' aria-labelledby='matrix-h'><h2 id='matrix-h'>Support matrix</h2>",
        "<p class='muted'>Does each image version start and serve each model profile? Newest version first; "
        "each cell opens the run it shows.</p>",
    ]
    if not data.matrix:
        parts.append("<p>No run yet: nothing has been tried.</p></section>")
        return "".join(parts)
    panels: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in data.matrix:
        panels.setdefault((r["host"], r["engine"]), []).append(r)
    for (host, engine), rows in sorted(panels.items()):
        profiles = sorted({r["model_profile"] for r in rows})
        versions: dict[tuple[int, str | None], dict[str, dict[str, Any]]] = {}
        for r in sorted(rows, key=lambda r: r["version_rank"]):
            versions.setdefault((r["version_rank"], r["image_version"]), {})[r["model_profile"]] = r
        body = []
        for (_, version), cells in versions.items():
            line = [esc(version if version is not None else "(no image version)")]
            for p in profiles:
                c = cells.get(p)
                if c is None:
                    line.append("–")
                    continue
                text = run_link(data, c["run_id"], MATRIX_WORDS.get(c["outcome"], c["outcome"]))
                if c["status"] != "ok" and c["reason"]:
                    text += f"<br><span class='muted'>{esc(c['reason'][:200])}</span>"
                if c["attempts"] and c["attempts"] > 1:
                    text += (
                        f"<br><span class='muted'>{esc(c['attempts_served'])} of "
                        f"{esc(c['attempts'])} runs served</span>"
                    )
                line.append(text)
            body.append(line)
        parts.append(f"<h3>{esc(engine)} on {esc(host)}</h3>" + table(["image version", *profiles], body))
    parts.append("</section>")
    return "".join(parts)


def _latest(data: ReportData) -> str:
    level = data.concurrency
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in data.runs:  # oldest first: the last one of each series is its newest
        latest[(r["host"], r["engine"], r["model_profile"])] = r
    parts = [
        "<section id='latest' aria-labelledby='latest-h'><h2 id='latest-h'>Latest figures per engine</h2>",
        f"<p class='muted'>The newest run of each engine, model profile and host. TTFT p95 with its 95 % "
        f"confidence interval (distribution-free); output throughput at {level} clients.</p>",
    ]
    if not latest:
        parts.append("<p>none</p>")
    engines = sorted({k[1] for k in latest})
    for engine in engines:
        rows = []
        for (host, e, profile), r in sorted(latest.items()):
            if e != engine:
                continue
            sweep = figure(data, r["run_id"], "concurrency_sweep", level)
            decode = figure(data, r["run_id"], "decode")
            prefill = [
                a["prefill_tokens_per_s"]
                for a in data.figures.get(r["run_id"], [])
                if a["scenario"] == "prefill_ladder" and a["prefill_tokens_per_s"] is not None
            ]
            eff = r["decode_efficiency"]
            rows.append(
                [
                    esc(host),
                    esc(profile),
                    esc(r["image_version"]),
                    esc(r["status"]),
                    esc(
                        percentile_text(
                            sweep["ttft_p95_ms"],
                            95,
                            sweep["requests_ok"],
                            "ms",
                            sweep["ttft_p95_ci_low_ms"],
                            sweep["ttft_p95_ci_high_ms"],
                        )
                    )
                    if sweep
                    else "–",
                    esc(number(sweep["output_tokens_per_s"], "tok/s")) if sweep else "–",
                    esc(number(decode["decode_tokens_per_s"], "tok/s")) if decode else "–",
                    esc(number(max(prefill), "tok/s", 0)) if prefill else "–",
                    esc(memory(r["held_bytes"])),
                    esc(f"{eff * 100:.1f} % of the bandwidth limit") if eff is not None else "–",
                    run_link(data, r["run_id"], local_time(r["started_at"], data.timezone, "%Y-%m-%d %H:%M")),
                ]
            )
        parts.append(
            f"<h3>{esc(engine)}</h3>"
            + table(
                [
                    "host",
                    "model profile",
                    "version",
                    "status",
                    f"TTFT p95 at {level} clients",
                    f"output at {level} clients",
                    "decode",
                    "prefill (best)",
                    "memory held",
                    "decode efficiency",
                    "run",
                ],
                rows,
                numeric={4, 5, 6, 7, 8},
            )
        )
    parts.append("</section>")
    return "".join(parts)


def index_html(data: ReportData, since: Since, charts: list[ReportChart]) -> str:
    title = "strix-pipeline weekly report"
    nav = (
        "<nav aria-label='sections'><ul>"
        + "".join(
            f"<li><a href='#{a}'>{t}</a></li>"
            for a, t in (
                ("answer", "The answer"),
                ("side-by-side", "Side by side"),
                ("verdict", "Verdict"),
                ("changes", "What changed"),
                ("trends", "Trends"),
                ("matrix", "Support matrix"),
                ("latest", "Latest figures"),
            )
        )
        + f"<li><a href='{GLOSSARY}'>Glossary</a></li><li><a href='{FEED}'>Atom feed</a></li></ul></nav>"
    )
    body = (
        "<a class='skip' href='#answer'>Skip to the answer</a>"
        f"<header><h1>{esc(title)}</h1>{nav}</header><main>"
        + answer_html(data)
        + f"<p class='muted'>Written {when_text(data, data.as_of)} from the warehouse; "
        f"times in {esc(data.timezone)}.</p>"
        + _side_by_side(data)
        + _verdict(data)
        + _news(data, since)
        + _trends(data, charts)
        + _matrix(data)
        + _latest(data)
        + "</main><footer><p class='muted'>strix-pipeline · "
        + link(FEED, "subscribe to the feed")
        + " (verdict changes, confirmed regressions, new support-matrix cells)</p></footer>"
        + f"<script>{vega_bundle()}</script><script>{BOOT_JS}</script>"
    )
    head = f"<link rel='alternate' type='application/atom+xml' title='{esc(title)}' href='{FEED}'>"
    return page(title, body, head=head, csp=index_csp())
