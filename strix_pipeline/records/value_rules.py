"""What no import may load: the value rules of every import path, written once as data."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any

from strix_pipeline.records.request_table import RequestRecord
from strix_pipeline.records.tables import LevelAggregate, MemorySample, RunRecord

# ---- what no import may load ------------------------------------------------------------------------
#
# The value rules of every import path (``strix import FILE`` and ``strix import --parquet DIR``),
# written once as data so the Python check of a peer file's records and the SQL check of a Parquet
# directory are the same rules. A duration, latency, throughput, count or size is never negative nor
# infinite; a closed loop runs at least one request at a time. NULL ("not measured") always passes.
# Signed on purpose, so not listed: held_bytes (memory an engine gave back), ServerMetricSample.value
# (a gauge), the decisions' values and thresholds.


@dataclass(frozen=True)
class ValueRule:
    field: str
    minimum: float = 0.0
    when: tuple[str, str] | None = None  # (field, value): the rule holds only on such rows

    def refuses(self, value: Any, row: Any) -> bool:
        if value is None or (self.when is not None and getattr(row, self.when[0]) != self.when[1]):
            return False
        return isinstance(value, (int, float)) and not (math.isfinite(value) and value >= self.minimum)

    def sql(self) -> str:
        """A predicate true for a row this rule refuses."""
        cond = (
            f'"{self.field}" IS NOT NULL AND (NOT isfinite("{self.field}"::DOUBLE) OR '
            f'"{self.field}" < {self.minimum})'
        )
        if self.when is not None:
            cond += f" AND \"{self.when[0]}\" = '{self.when[1]}'"
        return cond

    def says(self) -> str:
        what = "a finite number >= 0" if self.minimum == 0 else f"a finite number >= {self.minimum:g}"
        return what + (f" where {self.when[0]} is {self.when[1]!r}" if self.when else "")


def _numeric(cls: type, *, skip: tuple[str, ...] = ()) -> list[ValueRule]:
    hints = typing.get_type_hints(cls)
    return [
        ValueRule(f.name)
        for f in dataclasses.fields(cls)
        if f.name not in skip and hints[f.name] in (int, float, int | None, float | None)
    ]


VALUE_RULES: dict[type, list[ValueRule]] = {
    LevelAggregate: [*_numeric(LevelAggregate), ValueRule("level", 1.0, ("level_kind", "concurrency"))],
    RequestRecord: [*_numeric(RequestRecord), ValueRule("level", 1.0, ("level_kind", "concurrency"))],
    RunRecord: _numeric(RunRecord, skip=("held_bytes",)),
    MemorySample: _numeric(MemorySample),
}


def refused_value(row: Any) -> tuple[str, Any, str] | None:
    """(field, value, what the field must be) of the first value of ``row`` the import rules refuse."""
    for rule in VALUE_RULES.get(type(row), ()):
        value = getattr(row, rule.field)
        if rule.refuses(value, row):
            return rule.field, value, rule.says()
    return None
