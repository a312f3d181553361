"""The switch decision: five criteria (six with the owner's SLOs), each with its evidence, and a verdict
(docs/decision.md).

Every criterion is pass, fail or unknown; unknown means "no fresh evidence" (or an inconclusive
interval) and carries the reason, never quietly a pass or a fail. Evidence comes from the decision
host, from runs started within the freshness window before ``now``.

Verdicts (:func:`verdict_of`), over the required criteria, the first that holds:
  stay     C1 or C2 fails (whatever the others say);
  unknown  a criterion is unknown;
  switch   every one passes -- *provisional* until a second run (a repeat of the image, or the
           previous version) gives `switch` without the newest candidate run it rests on;
  evaluate C1-C3 (and C6, when required) pass, C4 or C5 fails;
  stay     otherwise: C3 or C6 fails (the candidate serves but is not faster, or not better within the
           owner's SLOs, with confidence).

Modules: ``evidence`` (the typed records judged), ``criteria`` (C1-C6, pure), ``verdict`` (the
verdict on them, pure), ``outcome`` (the :class:`Decision` record), ``gather`` (the SQL and the
history; :func:`evaluate`), ``replay`` (stored evaluations), ``report`` (markdown), ``sentence``
(the verdict as one sentence a person acts on: the page's, the feed's, the asset's and the
webhook's). More in docs/architecture.md.
"""

from strix_pipeline.analysis.decision.criteria import (
    CONFIDENCE,
    CRITERIA,
    CRITERION_FUNCTIONS,
    FORBIDDEN_IN_LAUNCH,
    GPT_OSS_QUANTIZATION,
    NOT_A_START_ATTEMPT,
    READY_STATUSES,
    goodput_within_slos,
    memory_not_above_llamacpp,
    official_image_starts,
    serves_gpt_oss_120b_mxfp4,
    serves_medium_moe,
    ttft_p95_beats_llamacpp_at_5,
)
from strix_pipeline.analysis.decision.evidence import Evidence, ReleaseImage, RunFacts, SweepReading
from strix_pipeline.analysis.decision.gather import (
    DECISION_AGGREGATES_SQL,
    DECISION_HISTORY_SQL,
    DECISION_IMAGES_SQL,
    DECISION_RUNS_SQL,
    DECISION_TTFT_SQL,
    evaluate,
    evidence_versions,
    gather_evidence,
)
from strix_pipeline.analysis.decision.matchup_table import (
    MatchupRow,
    decision_markdown,
    format_value,
    matchup_rows,
)
from strix_pipeline.analysis.decision.outcome import Decision
from strix_pipeline.analysis.decision.replay import (
    REPRODUCED_FIELDS,
    decision_differences,
    previous_decision,
    reproduce,
    stored_decision,
)
from strix_pipeline.analysis.decision.sentence import (
    HEADLINES,
    Wording,
    allowed_text,
    change_needed,
    criterion_title,
    engine_name,
    headline,
    held_text,
    interval_text,
    memory_ratio_words,
    no_evaluation_sentence,
    ratio_x,
    verdict_sentence,
    wording_of,
)
from strix_pipeline.analysis.decision.verdict import assess, judge, provisional, verdict_of

__all__ = [
    "CONFIDENCE",
    "CRITERIA",
    "CRITERION_FUNCTIONS",
    "DECISION_AGGREGATES_SQL",
    "DECISION_HISTORY_SQL",
    "DECISION_IMAGES_SQL",
    "DECISION_RUNS_SQL",
    "DECISION_TTFT_SQL",
    "FORBIDDEN_IN_LAUNCH",
    "HEADLINES",
    "GPT_OSS_QUANTIZATION",
    "NOT_A_START_ATTEMPT",
    "READY_STATUSES",
    "REPRODUCED_FIELDS",
    "Decision",
    "Evidence",
    "MatchupRow",
    "Wording",
    "ReleaseImage",
    "RunFacts",
    "SweepReading",
    "allowed_text",
    "assess",
    "change_needed",
    "criterion_title",
    "decision_differences",
    "decision_markdown",
    "engine_name",
    "evaluate",
    "evidence_versions",
    "format_value",
    "gather_evidence",
    "goodput_within_slos",
    "interval_text",
    "headline",
    "held_text",
    "judge",
    "memory_not_above_llamacpp",
    "memory_ratio_words",
    "no_evaluation_sentence",
    "official_image_starts",
    "matchup_rows",
    "previous_decision",
    "provisional",
    "ratio_x",
    "reproduce",
    "serves_gpt_oss_120b_mxfp4",
    "serves_medium_moe",
    "stored_decision",
    "ttft_p95_beats_llamacpp_at_5",
    "verdict_of",
    "verdict_sentence",
    "wording_of",
]
