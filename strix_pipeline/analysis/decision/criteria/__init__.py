"""C1-C7 as pure functions of the evidence and the config: no SQL, no warehouse.

Each criterion is named as in :data:`CRITERIA` and judges :class:`.evidence.Evidence` alone; the
verdict on their results is :mod:`..verdict`'s. One module per criterion -- ``starts`` (C1), ``serves``
(C2 and C4, one rule), ``ttft`` (C3), ``memory`` (C5), ``slo`` (C6, the owner's SLOs, judged only when
set), ``quality`` (C7, the evaluation set on the same weights) -- on what they share: ``runs`` (which
runs a criterion looks at, and its result), ``pairing`` (the runs C3, C5, C6 and C7 compare, on each
match-up) and ``failures`` (each side's failure rate, and a candidate failing more with confidence);
``functions`` maps each id to its function.
"""

from strix_pipeline.analysis.decision.criteria.functions import CRITERION_FUNCTIONS
from strix_pipeline.analysis.decision.criteria.memory import SAME_CONTEXT_TOLERANCE, memory_not_above_llamacpp
from strix_pipeline.analysis.decision.criteria.pairing import matchup_summary
from strix_pipeline.analysis.decision.criteria.quality import scores_not_below_baseline
from strix_pipeline.analysis.decision.criteria.runs import (
    CONFIDENCE,
    CRITERIA,
    FORBIDDEN_IN_LAUNCH,
    GPT_OSS_QUANTIZATION,
    MATCHUPS,
    NOT_A_START_ATTEMPT,
    READY_STATUSES,
)
from strix_pipeline.analysis.decision.criteria.serves import serves_gpt_oss_120b_mxfp4, serves_medium_moe
from strix_pipeline.analysis.decision.criteria.slo import goodput_within_slos
from strix_pipeline.analysis.decision.criteria.starts import official_image_starts
from strix_pipeline.analysis.decision.criteria.ttft import ttft_p95_beats_llamacpp_at_5

__all__ = [
    "CONFIDENCE",
    "CRITERIA",
    "CRITERION_FUNCTIONS",
    "FORBIDDEN_IN_LAUNCH",
    "GPT_OSS_QUANTIZATION",
    "NOT_A_START_ATTEMPT",
    "MATCHUPS",
    "READY_STATUSES",
    "SAME_CONTEXT_TOLERANCE",
    "goodput_within_slos",
    "memory_not_above_llamacpp",
    "official_image_starts",
    "scores_not_below_baseline",
    "matchup_summary",
    "serves_gpt_oss_120b_mxfp4",
    "serves_medium_moe",
    "ttft_p95_beats_llamacpp_at_5",
]
