"""An evaluation's outcome: the verdict, the criterion results (five, six with SLOs set) and what changed
since the last."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from strix_pipeline.records import CriterionResult


@dataclass
class Decision:
    verdict: str  # "switch" | "evaluate" | "stay" | "unknown"
    evaluation_id: str
    evaluated_at: datetime
    host: str
    criteria: list[CriterionResult]
    previous_verdict: str | None = None
    previous_statuses: dict[str, str] = field(default_factory=dict)  # criterion -> status last time
    reason: str = ""
    provisional: bool = False  # a `switch` that rests on one candidate run (see criteria.provisional)

    @property
    def label(self) -> str:
        """The verdict as a person reads it: ``switch (provisional)`` until a second run agrees."""
        return f"{self.verdict} (provisional)" if self.provisional else self.verdict

    @property
    def verdict_changed(self) -> bool:
        return self.previous_verdict is not None and self.previous_verdict != self.verdict

    def without_fresh_evidence(self, required: list[str]) -> list[CriterionResult]:
        """The required criteria that are unknown: no evidence inside the freshness window."""
        return [c for c in self.criteria if c.criterion in set(required) and c.status == "unknown"]

    def changed_criteria(self) -> list[tuple[str, str, str]]:
        """(criterion, before, now) for each criterion whose status moved since the last evaluation."""
        return [
            (c.criterion, self.previous_statuses[c.criterion], c.status)
            for c in self.criteria
            if c.criterion in self.previous_statuses and self.previous_statuses[c.criterion] != c.status
        ]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return json.loads(json.dumps(d, default=_json_default))


def _json_default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    raise TypeError(f"not JSON serialisable: {type(o)}")
