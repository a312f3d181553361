"""Stored evaluations: rebuilt from table ``decisions``, and replayed to show they reproduce."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from strix_pipeline.analysis.decision.gather import evaluate, query_rows
from strix_pipeline.analysis.decision.outcome import Decision
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import CriterionResult

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

# The stored columns a replay must give back exactly (evaluation_id, evaluated_at and host are its key).
REPRODUCED_FIELDS = tuple(
    f for f in CriterionResult.__dataclass_fields__ if f not in ("evaluation_id", "evaluated_at", "host")
)


def stored_decision(wh: Warehouse, evaluation_id: str) -> Decision | None:
    """One stored evaluation, rebuilt from the decisions table (None: no such id)."""
    try:
        rows = query_rows(
            wh, "SELECT * FROM decisions WHERE evaluation_id = ? ORDER BY criterion", [evaluation_id]
        )
    except Exception:  # noqa: BLE001 - a warehouse without decisions: no such evaluation
        return None
    return _decision_from_rows(rows) if rows else None


def _decision_from_rows(rows: list[dict[str, Any]]) -> Decision:
    fields = CriterionResult.__dataclass_fields__
    crits = [CriterionResult(**{k: r.get(k) for k in fields if k in r}) for r in rows]
    for c in crits:
        c.evidence_run_ids = list(c.evidence_run_ids or [])
        c.image_digests = list(c.image_digests or [])
        c.provisional = bool(c.provisional)
    first = rows[0]
    return Decision(
        verdict=first["verdict"],
        evaluation_id=first["evaluation_id"],
        evaluated_at=first["evaluated_at"],
        host=first["host"],
        criteria=crits,
        provisional=bool(first.get("provisional")),
    )


def _reproduces(a: Any, b: Any) -> bool:
    """A stored value and its recomputation agree: floats to storage precision, times in any zone."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    if isinstance(a, datetime) and isinstance(b, datetime):
        return a.astimezone(UTC) == b.astimezone(UTC)
    return a == b


def decision_differences(stored: Decision, recomputed: Decision) -> list[str]:
    """What differs between a stored evaluation and its replay, field by field (empty: equal)."""
    diffs = []
    if stored.verdict != recomputed.verdict or stored.provisional != recomputed.provisional:
        diffs.append(f"verdict: stored {stored.label!r}, recomputed {recomputed.label!r}")
    old = {c.criterion: c for c in stored.criteria}
    new = {c.criterion: c for c in recomputed.criteria}
    for cid in sorted(old.keys() | new.keys()):
        if cid not in old or cid not in new:
            diffs.append(f"{cid}: only in the {'stored' if cid in old else 'recomputed'} evaluation")
            continue
        for f in REPRODUCED_FIELDS:
            a, b = getattr(old[cid], f), getattr(new[cid], f)
            if not _reproduces(a, b):
                diffs.append(f"{cid}.{f}: stored {a!r}, recomputed {b!r}")
    return diffs


def reproduce(wh: Warehouse, config: StrixConfig, evaluation_id: str) -> tuple[Decision, Decision, list[str]]:
    """Recompute a stored evaluation from the warehouse: (stored, recomputed, differences).

    The replay runs on the stored host at the stored evaluated_at with the stored id, under the
    current config (a changed criterion setting shows up as a difference, as it should).
    Raises KeyError when no evaluation has that id.
    """
    stored = stored_decision(wh, evaluation_id)
    if stored is None:
        raise KeyError(evaluation_id)
    cfg = config
    if config.decision.host != stored.host:
        cfg = config.model_copy(update={"decision": config.decision.model_copy(update={"host": stored.host})})
    recomputed = evaluate(wh, cfg, now=stored.evaluated_at, evaluation_id=evaluation_id)
    return stored, recomputed, decision_differences(stored, recomputed)


def previous_decision(wh: Warehouse, host: str, *, before: datetime | None = None) -> Decision | None:
    """The last stored evaluation on `host` (before `before`), rebuilt from the decisions table."""
    sql = "SELECT * FROM decisions WHERE host = ? AND evaluated_at < ? ORDER BY evaluated_at DESC, criterion"
    try:
        rows = query_rows(wh, sql, [host, before or datetime.now(UTC) + timedelta(days=1)])
    except Exception:  # noqa: BLE001 - a warehouse without decisions: no previous evaluation
        return None
    if not rows:
        return None
    eid = rows[0]["evaluation_id"]
    mine = sorted((r for r in rows if r["evaluation_id"] == eid), key=lambda r: r["criterion"])
    return _decision_from_rows(mine)
