"""The charts' data: SQL on the read model's views, and rows grouped into panels with version labels.

The views (warehouse/sql/views.sql) define "usable", "version order" and "series"; a query that fails
gives no rows (a chart is never worth failing the pipeline over), and the chart says what is missing --
unless the warehouse could not be read at all (the sandbox refused what a view reads, a damaged file):
then the charts fail, so no emptied chart is published over the last good ones.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from strix_pipeline.warehouse.unreadable import refuse_unreadable

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 5
NO_VERSION = "(no image version)"

# The read model's views (warehouse/sql/views.sql) define "usable", "version order" and "series":
# every run, with its concurrency-N aggregate when it has one (a failed run has none and must still show).
CHART_TTFT_SQL = """
SELECT r.run_id, r.host, r.engine, r.model_profile, r.quantization, r.fingerprint, r.image_version,
       r.image_tag, r.image_digest, r.version_order, r.started_at, r.status, r.usable,
       r.failure_reason, a.requests_ok, a.requests_failed, a.ttft_p95_ms, a.ttft_p95_ci_low_ms,
       a.ttft_p95_ci_high_ms
FROM v_run_base r
LEFT JOIN aggregates a ON a.run_id = r.run_id AND a.scenario = 'concurrency_sweep' AND a.level = ?
"""
CHART_SCENARIO_SQL = """
SELECT run_id, host, engine, model_profile, image_version, image_tag, image_digest,
       version_order, started_at, level, requests_ok, requests_failed,
       output_tokens_per_s, prefill_tokens_per_s, ttft_p95_ms
FROM v_run_aggregates
WHERE scenario = ? AND usable
"""
CHART_MEMORY_SQL = """
SELECT run_id, host, engine, model_profile, quantization, image_version, image_tag, image_digest,
       version_order, started_at, status, usable, failure_reason, held_bytes, peak_bytes
FROM v_run_base
"""
CHART_SUPPORT_SQL = """
SELECT host, engine, image_version, version_order, version_rank, model_profile, quantization, outcome,
       starts, serves, fails, status, reason, run_id, started_at, attempts, attempts_served, cell
FROM v_support_matrix
ORDER BY host, engine, version_rank, model_profile
"""
CHART_DECISIONS_SQL = """
SELECT evaluation_id, evaluated_at, host, verdict, criterion, name, status, reason
FROM v_decisions ORDER BY evaluated_at, criterion
"""


def chart_rows(wh: Warehouse, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    try:
        return list(wh.query_df(sql, params).iter_rows(named=True))
    except Exception as e:  # noqa: BLE001 - a chart is never worth failing the pipeline over
        refuse_unreadable(e)  # ... but an unreadable warehouse is: its charts would all be empty
        log.warning("chart query failed: %s", e)
        return []


def _plain(v: Any) -> Any:
    if isinstance(v, datetime | date):
        return v.isoformat()
    return v


def json_values(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in r.items()} for r in rows]


def version_order_key(r: dict[str, Any]) -> tuple[str, str]:
    return (r["version_order"], str(r["started_at"]))


def _panel_key(r: dict[str, Any]) -> tuple[str, str, str]:
    return (r["host"], r["engine"], r["model_profile"])


def panel_title(key: tuple[str, str, str]) -> str:
    host, engine, profile = key
    return f"{engine} · {profile} @ {host}"


def label_versions(rows: list[dict[str, Any]]) -> list[str]:
    """Give each row a `version` label (digest added where one tag names several digests); return the
    labels in version order. Rows must be one panel's."""
    digests: dict[str, set[str]] = {}
    for r in rows:
        base = r.get("image_version") or r.get("image_tag") or (r.get("image_digest") or "?")[:19]
        r["version"] = base
        digests.setdefault(base, set()).add(r.get("image_digest") or "")
    for r in rows:
        if len(digests[r["version"]]) > 1 and r.get("image_digest"):
            r["version"] = f"{r['version']}@{r['image_digest'].removeprefix('sha256:')[:8]}"
    order: list[str] = []
    for r in sorted(rows, key=version_order_key):
        if r["version"] not in order:
            order.append(r["version"])
    return order


def by_panel(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    panels: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        panels.setdefault(_panel_key(r), []).append(r)
    return dict(sorted(panels.items()))


def failed_run(r: dict[str, Any], metric: str) -> bool:
    if not r["usable"]:
        return True
    return r.get("requests_ok") is not None and r["requests_ok"] == 0 and r.get(metric) is None


def newest_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the newest image's latest run in each (host, engine, model profile)."""
    out: list[dict[str, Any]] = []
    for _, prow in by_panel(rows).items():
        newest = max(prow, key=version_order_key)
        label_versions(prow)
        out += [r for r in prow if r["run_id"] == newest["run_id"]]
    for r in out:
        r["series"] = f"{r['engine']} {r['version']} · {r['model_profile']} @ {r['host']}"
    return out


def support_matrix_rows(wh: Warehouse) -> list[dict[str, Any]]:
    """v_support_matrix: one row per (host, engine, image version, model profile), newest version first."""
    return chart_rows(wh, CHART_SUPPORT_SQL)


def matrix_version(r: dict[str, Any]) -> str:
    # an imported peer run has no image, so no version: a null in Vega-Lite's sort list is invalid
    return r["image_version"] if r["image_version"] is not None else NO_VERSION


def by_engine(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    panels: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        panels.setdefault((r["host"], r["engine"]), []).append(r)
    return dict(sorted(panels.items()))
