"""C1: the newest official release of the candidate reached ready on the host with no override."""

from __future__ import annotations

from strix_pipeline.analysis.decision.criteria.runs import (
    FORBIDDEN_IN_LAUNCH,
    NOT_A_START_ATTEMPT,
    _all_candidate_runs,
    _label,
    _official_sources,
    _order,
    _override,
    _ready,
    _repos,
    _result,
    _stale_reason,
)
from strix_pipeline.analysis.decision.evidence import Evidence
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import CriterionResult
from strix_pipeline.registry.names import normalize_repository


def official_image_starts(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C1: the newest official release reached ready on the host with no override."""
    d = config.decision
    cand = _all_candidate_runs(ev, config)
    sources = _official_sources(config)
    if not sources:
        return _result(
            "C1", "unknown", f"engine {d.candidate_engine!r} has no official image source configured"
        )
    repos = _repos(sources)
    floating = {t for s in sources for t in s.floating}
    official = [
        r for r in cand if normalize_repository(r.image_repository) in repos and r.image_tag not in floating
    ]
    names = ", ".join(sorted(s.repository for s in sources))
    if not official:
        return _result("C1", "unknown", f"no run of an official {names} release image on host {d.host}")
    newest = max(official, key=_order)
    key = newest.version_order
    # The registry may know a newer release than anything benchmarked: that one is what C1 is about.
    released = [
        i
        for i in ev.images
        if normalize_repository(i.repository) in repos and not i.floating and not i.gone and i.sort_key
    ]
    if released:
        top = max(released, key=lambda i: i.sort_key)
        if top.sort_key > key:
            return _result(
                "C1",
                "unknown",
                f"the newest official release {top.repository}:{top.tag} ({top.digest[:19]}) "
                f"has no run on host {d.host} yet",
            )
    same = [r for r in official if r.version_order == key]
    fresh = [r for r in same if ev.fresh(r)]
    if not fresh:
        return _result(
            "C1",
            "unknown",
            _stale_reason(f"runs of {_label(newest)}", same, d.freshness_days),
            runs=same[-1:],
        )
    ready = [r for r in fresh if _ready(r)]
    if ready:
        return _result("C1", "pass", f"{_label(ready[-1])} reached ready on {d.host}", runs=ready)
    overridden = [r for r in fresh if _override(r)]
    if overridden:
        r = overridden[-1]
        return _result(
            "C1",
            "fail",
            f"{_label(r)} started on {d.host} with {FORBIDDEN_IN_LAUNCH} in {_override(r)} (run {r.run_id}): "
            "C1 asks for a start with no override",
            runs=overridden,
        )
    attempts = [r for r in fresh if r.status not in NOT_A_START_ATTEMPT]
    if not attempts:
        return _result(
            "C1",
            "unknown",
            f"no fresh run of {_label(newest)} tried to start it on {d.host} "
            f"({', '.join(sorted({r.status for r in fresh}))})",
            runs=fresh,
        )
    why = "; ".join(f"{r.status}: {r.failure_reason or 'no reason recorded'}" for r in attempts[-3:])
    return _result("C1", "fail", f"{_label(newest)} did not reach ready on {d.host} ({why})", runs=attempts)
