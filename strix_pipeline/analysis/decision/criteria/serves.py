"""C2 and C4: the candidate served a model (the medium MoE; gpt-oss-120b from its MXFP4 weights),
one rule for both."""

from __future__ import annotations

from strix_pipeline.analysis.decision.criteria.runs import (
    GPT_OSS_QUANTIZATION,
    _candidate_runs,
    _label,
    _order,
    _result,
    _served,
    _stale_reason,
)
from strix_pipeline.analysis.decision.evidence import Evidence, RunFacts
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import CriterionResult


def _newest_image_runs(runs: list[RunFacts]) -> list[RunFacts]:
    key = max(runs, key=_order).version_order
    return sorted((r for r in runs if r.version_order == key), key=lambda r: r.started_at)


def _serves(ev: Evidence, config: StrixConfig, cid: str, profile: str) -> CriterionResult:
    """C2 / C4 shape: the newest image with a fresh run of `profile` returned valid smoke output."""
    of_model = [r for r in _candidate_runs(ev, config) if r.model_profile == profile]
    fresh = [r for r in of_model if ev.fresh(r)]
    if not fresh:
        return _result(
            cid,
            "unknown",
            _stale_reason(
                f"candidate runs of model profile {profile!r}", of_model, config.decision.freshness_days
            ),
        )
    if cid == "C4":
        # "no conversion": only the published MXFP4 weights count
        native = [r for r in fresh if (r.quantization or "").upper() == GPT_OSS_QUANTIZATION]
        if not native:
            quants = ", ".join(sorted({r.quantization for r in fresh}))
            return _result(
                cid, "fail", f"{profile} ran only as {quants}, not the published MXFP4", runs=fresh
            )
        fresh = native
    image_runs = _newest_image_runs(fresh)
    served = [r for r in image_runs if _served(r, ev.smoke_ok)]
    if served:
        return _result(cid, "pass", f"{_label(served[-1])} served {profile}: smoke output valid", runs=served)
    why = "; ".join(
        f"{r.status}" + (f": {r.failure_reason}" if r.failure_reason else ": smoke failed")
        for r in image_runs[-3:]
    )
    return _result(cid, "fail", f"{_label(image_runs[-1])} did not serve {profile} ({why})", runs=image_runs)


def serves_medium_moe(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C2: the newest official image with a fresh run of the medium MoE returned valid smoke output."""
    return _serves(ev, config, "C2", config.decision.medium_moe_model)


def serves_gpt_oss_120b_mxfp4(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C4: likewise gpt-oss-120b, from its published MXFP4 weights only."""
    return _serves(ev, config, "C4", config.decision.gpt_oss_model)
