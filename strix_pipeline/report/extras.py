"""What a change may carry beyond its first stored columns, read only where the warehouse has it
(schema v8): the canary's ``changes.host_drift`` (why the host, not the engine, is
suspected) and the ``bisections`` that looked for the first release showing it. An older warehouse
gives none, never an error: the report shows "none" / "not bisected"."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strix_pipeline.warehouse.unreadable import refuse_unreadable

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

log = logging.getLogger(__name__)

DRIFT_SQL = "SELECT change_id, host_drift FROM changes WHERE host_drift IS NOT NULL AND host_drift <> ''"
BISECTIONS_SQL = """
SELECT change_id, status, first_release, last_without, reason
FROM bisections WHERE change_id IS NOT NULL
ORDER BY updated_at
"""


# a bisection that named the first release: found by benchmarking between, or nothing was between
FOUND = ("found", "nothing_between")


@dataclass(frozen=True)
class ChangeExtras:
    host_drift: str | None = None  # why the host is suspected (the canary moved too); None: not
    bisection_status: str | None = None  # running | found | inconclusive | exhausted | nothing_between
    bisected_release: str | None = None  # the first release that shows the change (FOUND)
    bisection_reason: str | None = None

    @property
    def bisection_text(self) -> str:
        if self.bisected_release:
            return self.bisected_release
        if self.bisection_status:
            why = f": {self.bisection_reason}" if self.bisection_reason else ""
            return f"bisection {self.bisection_status.replace('_', ' ')}{why}"
        return "not bisected"


def _rows(wh: Warehouse, sql: str) -> list[dict[str, Any]]:
    try:
        return list(wh.query_df(sql).iter_rows(named=True))
    except Exception as e:  # noqa: BLE001 - a warehouse before schema v8 has neither: nothing to show
        refuse_unreadable(e)
        log.debug("report extras not in this warehouse: %s", e)
        return []


def change_extras(wh: Warehouse) -> dict[str, ChangeExtras]:
    """change_id -> its host-drift label and its latest bisection, where the warehouse has them."""
    drift = {r["change_id"]: r["host_drift"] for r in _rows(wh, DRIFT_SQL)}
    bisections = {r["change_id"]: r for r in _rows(wh, BISECTIONS_SQL)}  # the latest one of each change
    out = {}
    for cid in drift.keys() | bisections.keys():
        b = bisections.get(cid) or {}
        out[cid] = ChangeExtras(
            host_drift=drift.get(cid),
            bisection_status=b.get("status"),
            bisected_release=b.get("first_release") if b.get("status") in FOUND else None,
            bisection_reason=b.get("reason"),
        )
    return out
