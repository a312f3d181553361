"""Prometheus text as (name, labels, value) triples, and a metric's total: the tests' reading of a scrape."""

from __future__ import annotations

import math

from strix_pipeline.loadgen.prometheus import KEEP_PREFIXES, parse_exposition


def parse_prometheus(
    text: str, keep: tuple[str, ...] = KEEP_PREFIXES
) -> list[tuple[str, dict[str, str], float]]:
    """Parse the text exposition format into (name, labels, value); comments and other families skipped.

    :func:`parse_exposition` gives each sample's family, type and help as well."""
    return [(s.name, s.labels, s.value) for s in parse_exposition(text, keep)]


def sample_value(samples: list[tuple[str, dict[str, str], float]], name: str) -> float | None:
    """Sum of a metric's samples over its label sets (None if absent)."""
    vals = [v for n, _, v in samples if n == name and not math.isnan(v)]
    return sum(vals) if vals else None
