"""Failures count: each side's failure rate in a criterion's reason, and whether the candidate's is
higher with confidence -- a fail of C3 and of the SLO criterion, whatever else they measured."""

from __future__ import annotations

from strix_pipeline.analysis.decision.criteria.runs import CONFIDENCE
from strix_pipeline.analysis.decision.evidence import SweepReading
from strix_pipeline.stats.proportions import rate_excess


def failure_clause(cand: SweepReading, base: SweepReading, base_name: str) -> tuple[bool, str]:
    """(worse, clause): both sides' failure rates, and whether the candidate's is higher with
    confidence -- the one-sided lower bound of the difference above 0 (stats.proportions.rate_excess,
    Newcombe's score interval at C3's confidence)."""
    diff = rate_excess(cand.requests_failed, cand.requests, base.requests_failed, base.requests, CONFIDENCE)
    rates = (
        f"failed requests {cand.requests_failed}/{cand.requests} ({diff.a:.1%}) vs {base_name} "
        f"{base.requests_failed}/{base.requests} ({diff.b:.1%})"
    )
    if diff.worse:
        return True, (
            f"the candidate fails more requests with confidence: {rates}, the difference at least "
            f"{diff.lower:.1%} ({diff.level:.0%} one-sided)"
        )
    return False, rates
