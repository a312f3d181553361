"""Each criterion's function, by its id."""

from __future__ import annotations

from collections.abc import Callable

from strix_pipeline.analysis.decision.criteria.memory import memory_not_above_llamacpp
from strix_pipeline.analysis.decision.criteria.quality import scores_not_below_baseline
from strix_pipeline.analysis.decision.criteria.serves import serves_gpt_oss_120b_mxfp4, serves_medium_moe
from strix_pipeline.analysis.decision.criteria.slo import goodput_within_slos
from strix_pipeline.analysis.decision.criteria.starts import official_image_starts
from strix_pipeline.analysis.decision.criteria.ttft import ttft_p95_beats_llamacpp_at_5
from strix_pipeline.analysis.decision.evidence import Evidence
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import CriterionResult

# In CRITERIA's order; each function is named as its criterion (tests/unit/analysis/test_decision.py
# holds that).
CRITERION_FUNCTIONS: dict[str, Callable[[Evidence, StrixConfig], CriterionResult]] = {
    "C1": official_image_starts,
    "C2": serves_medium_moe,
    "C3": ttft_p95_beats_llamacpp_at_5,
    "C4": serves_gpt_oss_120b_mxfp4,
    "C5": memory_not_above_llamacpp,
    "C6": goodput_within_slos,  # only with the owner's SLOs set (verdict.assess)
    "C7": scores_not_below_baseline,  # required when judged (verdict.required_now)
}
