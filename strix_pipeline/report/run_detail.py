"""One run's page as HTML text: what it measured first (its figures, then its memory), then the plumbing
folded away (the run's facts, the host, the launch command, the log tail with known harmless noise
folded). An ok run's reason is a note, a failed run's the reason it failed. Every value from the
warehouse passes through :func:`esc`; the page runs no script."""

from __future__ import annotations

from typing import Any

from strix_pipeline.report.intervals import interval_of
from strix_pipeline.report.log_noise import fold_noise
from strix_pipeline.report.markup import esc, memory, number, page, table
from strix_pipeline.report.names import GLOSSARY, INDEX
from strix_pipeline.report.page_parts import or_none, when_text
from strix_pipeline.report.site_data import ReportData
from strix_pipeline.report.workload import percentile_text, too_few, workload_text

# a run page runs no script and loads nothing: the policy says so
RUN_PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _facts(pairs: list[tuple[str, object]]) -> str:
    rows = "".join(f"<tr><th scope='row'>{esc(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f"<div class='scroll'><table class='facts'><tbody>{rows}</tbody></table></div>"


def _pre(text: str | None, what: str) -> str:
    return f"<pre>{esc(text)}</pre>" if text else f"<p>no {esc(what)} recorded</p>"


def _folded(title: str, inner: str) -> str:
    """A section a reader opens when they need it (no script: the browser's own disclosure)."""
    return f"<details><summary><h2>{esc(title)}</h2></summary>{inner}</details>"


def _reason(r: dict[str, Any]) -> str:
    """The run's recorded reason: a note on an ok run (a retried connection), why on any other."""
    if not r["failure_reason"]:
        return ""
    if r["status"] == "ok":
        return f"<p>Note: {esc(r['failure_reason'])}</p>"
    return f"<p>Why it is {esc(r['status'])}: {esc(r['failure_reason'])}</p>"


def run_html(data: ReportData, r: dict[str, Any]) -> str:
    duration = (
        f"{(r['ended_at'] - r['started_at']).total_seconds():,.0f} s"
        if r["ended_at"] and r["started_at"]
        else "–"
    )
    bandwidth = r["bandwidth_bytes_per_s"]
    figures = [
        [
            esc(a["scenario"]),
            esc(a["level"]),
            esc(workload_text(a)),
            # a level too small for a percentile says so instead of printing its largest request
            esc(
                percentile_text(
                    a["ttft_p95_ms"],
                    95,
                    a["requests_ok"],
                    "ms",
                    a["ttft_p95_ci_low_ms"],
                    a["ttft_p95_ci_high_ms"],
                )
            ),
            esc(percentile_text(a["ttft_p50_ms"], 50, a["requests_ok"], "ms")),
            esc(number(a["tpot_p50_ms"], "ms")),
            esc(percentile_text(a["e2e_p95_ms"], 95, a["requests_ok"], "ms")),
            esc(number(a["output_tokens_per_s"], "tok/s")),
            esc(number(a["requests_per_s"], "req/s", 2)),
            esc(number(a["prefill_tokens_per_s"], "tok/s", 0)),
            esc(number(a["decode_tokens_per_s"], "tok/s")),
        ]
        for a in data.figures.get(r["run_id"], [])
    ]
    figures_html = or_none(
        figures,
        table(
            [
                "scenario",
                "level",
                "workload",
                "TTFT p95",
                "TTFT p50",
                "TPOT p50",
                "E2E p95",
                "output",
                "requests/s",
                "prefill",
                "decode",
            ],
            figures,
            numeric={1, 3, 4, 5, 6, 7, 8, 9, 10},
        ),
    )
    up = "../"
    percentiles = _percentiles_html(data.figures.get(r["run_id"], []))
    body = (
        f"<p><a href='{up}{INDEX}'>← the weekly report</a> · "
        f"<a href='{up}{GLOSSARY}'>Glossary</a></p><main>"
        f"<h1>Run {esc(r['run_id'])}</h1>"
        f"<p><strong>{esc(r['status'])}</strong> · {esc(r['engine'])} {esc(r['image_version'])} · "
        f"{esc(r['model_profile'])} on {esc(r['host'])} · started {when_text(data, r['started_at'])}</p>"
        + _reason(r)
        + "<h2>Figures</h2>"
        + figures_html
        + percentiles
        + "<h2>Memory</h2>"
        + _memory_html(r)
        + _folded(
            "Run",
            _facts(
                [
                    ("engine", esc(f"{r['engine']} ({r['engine_kind']})")),
                    ("image", esc(r["image"])),
                    ("image digest", esc(r["image_digest"])),
                    ("version", esc(r["image_version"])),
                    ("model profile", esc(r["model_profile"])),
                    ("model", esc(f"{r['model']} ({r['quantization']})")),
                    ("suite and profile", esc(f"{r['suite']} / {r['profile']}")),
                    ("started", when_text(data, r["started_at"])),
                    ("ended", when_text(data, r["ended_at"])),
                    ("duration", esc(duration)),
                    ("fingerprint", f"<code>{esc(r['fingerprint'])}</code>"),
                    ("harness version", esc(r["harness_version"])),
                    ("engine build", esc(r["engine_build"] or "–")),
                    ("engine flags", f"<code>{esc(r['engine_flags'] or '–')}</code>"),
                    ("Dagster run", esc(r["dagster_run_id"] or "–")),
                ]
            ),
        )
        + _folded(
            "Host",
            _facts(
                [
                    ("host", esc(f"{r['host']} ({r['host_kind'] or 'kind unknown'})")),
                    ("ROCm", esc(r["rocm_version"] or "–")),
                    ("kernel", esc(r["kernel"] or "–")),
                    ("firmware", esc(r["firmware"] or "–")),
                    ("kernel command line", f"<code>{esc(r['kernel_cmdline'] or '–')}</code>"),
                    (
                        "ttm.pages_limit",
                        esc(r["ttm_pages_limit"] if r["ttm_pages_limit"] is not None else "–"),
                    ),
                    (
                        "memory bandwidth (copy)",
                        esc(number(bandwidth / 1e9, "GB/s", 2) if bandwidth else "–"),
                    ),
                ]
            ),
        )
        + _folded("Command line", _pre(r["launch_command"], "command line"))
        + _folded("Log tail", _pre(fold_noise(r["log_tail"]) if r["log_tail"] else None, "log"))
        + "</main>"
    )
    return page(f"Run {r['run_id']}", body, csp=RUN_PAGE_CSP)


# the tail percentiles printed with their 95 % interval (.intervals), each level a row
TAILS = (("TTFT p99", "ttft_p99_ms", 99), ("ITL p50", "itl_p50_ms", 50), ("ITL p99", "itl_p99_ms", 99))


def _percentile_cell(a: dict[str, Any], column: str, p: float) -> str:
    interval = interval_of(a, column)
    if interval is None or too_few(p, a["requests_ok"]):
        return percentile_text(a[column], p, a["requests_ok"], "ms")
    return interval.text(a[column], "ms")


def _percentiles_html(aggregates: list[dict[str, Any]]) -> str:
    """The levels with a tail percentile: each with its interval, or why it has none (too few
    requests for the percentile, or too few values for its interval)."""
    rows = [
        [esc(a["scenario"]), esc(a["level"]), *(esc(_percentile_cell(a, c, p)) for _, c, p in TAILS)]
        for a in aggregates
        if any(a[c] is not None for _, c, _ in TAILS)
    ]
    if not rows:
        return ""
    return (
        "<h3>Tail percentiles</h3><p class='muted'>With their 95 % confidence interval (distribution-free, "
        "as TTFT p95's); ITL is every gap between two content events of a request.</p>"
        + table(["scenario", "level", *(t for t, _, _ in TAILS)], rows, numeric={1, 2, 3, 4})
    )


def _memory_html(r: dict[str, Any]) -> str:
    eff = r["decode_efficiency"]
    return _facts(
        [
            ("before start", esc(memory(r["baseline_bytes"]))),
            ("held after load", esc(memory(r["held_bytes"]))),
            ("peak", esc(memory(r["peak_bytes"]))),
            ("after stop", esc(memory(r["after_stop_bytes"]))),
            (
                "returned to baseline",
                esc({True: "yes", False: "no", None: "unknown"}[r["memory_returned"]]),
            ),
            (
                "decode efficiency",
                esc(
                    f"{eff * 100:.1f} % of the bandwidth limit"
                    if eff is not None
                    else r["efficiency_problem"] or "–"
                ),
            ),
        ]
    )
