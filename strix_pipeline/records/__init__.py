"""Typed records exchanged between the load generator, launchers, registry, warehouse and analysis.

Each dataclass maps one-to-one onto a warehouse table (same name, same column order): the warehouse
derives nothing the producer did not write, so what a user queries is what the harness measured.
Times are UTC-aware ``datetime``; durations are milliseconds; memory is bytes. A run's requests travel
in a :class:`RequestTable` (the same rows, kept column-ready for the warehouse's bulk loads).

Modules: ``request_table`` (a request and the run's requests), ``tables`` (every other table's record),
``value_rules`` (what no import may load). They are the ground floor: nothing else of the project.
"""

from strix_pipeline.records.request_table import (
    REQUEST_COLUMN_KINDS,
    REQUEST_SCALAR_FIELDS,
    RequestRecord,
    RequestTable,
)
from strix_pipeline.records.tables import (
    HARNESS_VERSION,
    LATENCY_METRICS,
    LATENCY_STATS,
    LOCAL_REGISTRY,
    CriterionResult,
    ImageRecord,
    LevelAggregate,
    MemorySample,
    QualityAnswer,
    RunRecord,
    RunResult,
    ServerMetricSample,
    column_names,
)
from strix_pipeline.records.value_rules import VALUE_RULES, ValueRule, refused_value

__all__ = [
    "HARNESS_VERSION",
    "LATENCY_METRICS",
    "LATENCY_STATS",
    "LOCAL_REGISTRY",
    "REQUEST_COLUMN_KINDS",
    "REQUEST_SCALAR_FIELDS",
    "VALUE_RULES",
    "CriterionResult",
    "ImageRecord",
    "LevelAggregate",
    "MemorySample",
    "QualityAnswer",
    "RequestRecord",
    "RequestTable",
    "RunRecord",
    "RunResult",
    "ServerMetricSample",
    "ValueRule",
    "column_names",
    "refused_value",
]
