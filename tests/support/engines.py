"""What an engine spec reserves, as one number: the tests' view of its reservations."""

from __future__ import annotations

from strix_pipeline.engines.base import EngineSpec


def reserved_gb(spec: EngineSpec) -> float:
    return sum(r.gb for r in spec.reservations)
