"""One run's page as HTML text: its facts, figures, memory, launch command and log tail. Every value
from the warehouse passes through :func:`esc`; the page runs no script."""

from __future__ import annotations

from typing import Any

from strix_pipeline.report.markup import esc, memory, number, page, table
from strix_pipeline.report.names import GLOSSARY, INDEX
from strix_pipeline.report.page_parts import or_none, when_text
from strix_pipeline.report.site_data import ReportData
from strix_pipeline.report.workload import percentile_text, workload_text

# a run page runs no script and loads nothing: the policy says so
RUN_PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _facts(pairs: list[tuple[str, object]]) -> str:
    rows = "".join(f"<tr><th scope='row'>{esc(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f"<div class='scroll'><table><tbody>{rows}</tbody></table></div>"


def _pre(text: str | None, what: str) -> str:
    return f"<pre>{esc(text)}</pre>" if text else f"<p>no {esc(what)} recorded</p>"


def run_html(data: ReportData, r: dict[str, Any]) -> str:
    duration = (
        f"{(r['ended_at'] - r['started_at']).total_seconds():,.0f} s"
        if r["ended_at"] and r["started_at"]
        else "–"
    )
    eff = r["decode_efficiency"]
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
    up = "../"
    body = (
        f"<p><a href='{up}{INDEX}'>← the weekly report</a> · <a href='{up}{GLOSSARY}'>Glossary</a></p><main>"
        f"<h1>Run {esc(r['run_id'])}</h1>"
        f"<p><strong>{esc(r['status'])}</strong> · {esc(r['engine'])} {esc(r['image_version'])} · "
        f"{esc(r['model_profile'])} on {esc(r['host'])} · started {when_text(data, r['started_at'])}</p>"
        + (f"<p>Why: {esc(r['failure_reason'])}</p>" if r["failure_reason"] else "")
        + "<h2>Command line</h2>"
        + _pre(r["launch_command"], "command line")
        + "<h2>Run</h2>"
        + _facts(
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
        )
        + "<h2>Host</h2>"
        + _facts(
            [
                ("host", esc(f"{r['host']} ({r['host_kind'] or 'kind unknown'})")),
                ("ROCm", esc(r["rocm_version"] or "–")),
                ("kernel", esc(r["kernel"] or "–")),
                ("firmware", esc(r["firmware"] or "–")),
                ("kernel command line", f"<code>{esc(r['kernel_cmdline'] or '–')}</code>"),
                ("ttm.pages_limit", esc(r["ttm_pages_limit"] if r["ttm_pages_limit"] is not None else "–")),
                ("memory bandwidth (copy)", esc(number(bandwidth / 1e9, "GB/s", 2) if bandwidth else "–")),
            ]
        )
        + "<h2>Memory</h2>"
        + _facts(
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
        + "<h2>Figures</h2>"
        + or_none(
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
        + "<h2>Log tail</h2>"
        + _pre(r["log_tail"], "log")
        + "</main>"
    )
    return page(f"Run {r['run_id']}", body, csp=RUN_PAGE_CSP)
