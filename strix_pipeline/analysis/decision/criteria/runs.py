"""What every criterion shares: the criteria's names and constants, which runs a criterion looks at
(the candidate's official ones, the baseline's), what a run reached, and the result it gives."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from strix_pipeline.analysis.decision.evidence import Evidence, RunFacts
from strix_pipeline.config import GFX_OVERRIDE, ImageSource, StrixConfig
from strix_pipeline.planning.production_baseline import PRODUCTION_AS_DEPLOYED
from strix_pipeline.records import CriterionResult
from strix_pipeline.registry.names import normalize_repository

CRITERIA = {
    "C1": "official_image_starts",
    "C2": "serves_medium_moe",
    "C3": "ttft_p95_beats_llamacpp_at_5",
    "C4": "serves_gpt_oss_120b_mxfp4",
    "C5": "memory_not_above_llamacpp",
    "C6": "goodput_within_slos",  # judged only when the owner set SLOs ([decision.slo])
    "C7": "scores_not_below_baseline",  # required when both sides answered the evaluation set
}
# A run stopped from outside before or while it started, or refused by a guard before anything
# started, says nothing about whether the engine starts: C1 neither passes nor fails on it.
NOT_A_START_ATTEMPT = frozenset({"cancelled", "failed_guard"})
FORBIDDEN_IN_LAUNCH = GFX_OVERRIDE  # C1 means "starts with no override"
GPT_OSS_QUANTIZATION = "MXFP4"
CONFIDENCE = 0.95  # C3's interval of the ratio of the two p95s
READY_STATUSES = ("ok", "partial", "failed_serve")  # reached ready (failed_serve: then served nothing)
# The two match-ups of the baseline engine against the candidate that C3 and C5 are judged on;
# decision.decided_by names the one the verdict takes. The production match-up is each engine in its
# production format (the baseline as decision.baseline_model names it); the equal-weights match-up is a
# baseline run at the candidate's own quantization -- the same weights -- so what is left between them
# is the engine.
MATCHUPS = ("production", "equal_weights")


# --------------------------------------------------------------------------------------------------
# Which runs a criterion looks at


def _official_sources(config: StrixConfig) -> list[ImageSource]:
    return [s for s in config.engines[config.decision.candidate_engine].images if s.official]


def _repos(sources: list[ImageSource]) -> set[str]:
    # both spellings of each source (a run may name its repository with or without the registry), each
    # in its one spelling, so a Docker Hub alias or ``library/`` on either side still matches
    return {normalize_repository(s.repository) for s in sources} | {
        normalize_repository(f"{s.registry}/{s.repository}") for s in sources
    }


def _all_candidate_runs(ev: Evidence, config: StrixConfig) -> list[RunFacts]:
    return [r for r in ev.runs if r.engine == config.decision.candidate_engine]


def _candidate_runs(ev: Evidence, config: StrixConfig) -> list[RunFacts]:
    """C2-C5 are about the official image when one is configured: a community build passing proves
    nothing about the image the Box would switch to."""
    cand = _all_candidate_runs(ev, config)
    sources = _official_sources(config)
    if not sources:
        return cand
    repos = _repos(sources)
    return [r for r in cand if normalize_repository(r.image_repository) in repos]


def _baseline_runs(ev: Evidence, config: StrixConfig) -> list[RunFacts]:
    return [r for r in ev.runs if r.engine == config.decision.baseline_engine]


def _order(r: RunFacts) -> tuple[str, datetime]:
    """Newest first when sorted in reverse: explicit version order, then the later run."""
    return (r.version_order, r.started_at)


def _label(r: RunFacts) -> str:
    digest = (r.image_digest or "")[:19]
    name = r.image_version or r.image_tag or "?"
    # a baseline read from production says so: the decision names which baseline it used
    name = f"{name}, {PRODUCTION_AS_DEPLOYED}" if r.baseline_source else name
    return f"{name} ({digest})" if digest else name


def _family(r: RunFacts, config: StrixConfig) -> str:
    if r.model_family:
        return r.model_family
    prof = config.models.get(r.model_profile)
    return prof.family if prof else r.model


def _context(r: RunFacts, config: StrixConfig) -> int | None:
    prof = config.models.get(r.model_profile)
    return prof.context_length if prof else None


def _env_names(recorded: str | None) -> set[str]:
    """The variable names in a recorded environment: a JSON object (the configuration's) or a JSON
    list of ``NAME=value`` (the image's own ENV, as Docker gives it); unreadable: none."""
    try:
        parsed = json.loads(recorded) if recorded else None
    except json.JSONDecodeError:
        return set()
    if isinstance(parsed, dict):
        return {str(k) for k in parsed}
    if isinstance(parsed, list):
        return {str(item).split("=", 1)[0] for item in parsed}
    return set()


def _override(r: RunFacts) -> str | None:
    """Where the run started with the override, if it did: its launch command, the environment the
    configuration gave it, or its image's own ENV (an image that sets it never starts without it)."""
    where = [
        what
        for what, found in (
            ("its launch command", FORBIDDEN_IN_LAUNCH in (r.launch_command or "")),
            ("the environment its configuration gave it", FORBIDDEN_IN_LAUNCH in _env_names(r.engine_env)),
            ("its image's own ENV", FORBIDDEN_IN_LAUNCH in _env_names(r.image_env)),
        )
        if found
    ]
    return " and ".join(where) or None


def _ready(r: RunFacts) -> bool:
    """Reached ready with no override: C1's evidence (serving is C2's and C4's)."""
    # a run cancelled after its engine was up has a launch command (it is set once ready)
    ready = r.status in READY_STATUSES or (r.status == "cancelled" and r.launch_command)
    return bool(ready) and _override(r) is None


def _served(r: RunFacts, smoke_ok: frozenset[str]) -> bool:
    """Ready, answered (usable: ok or partial) and the smoke output was valid."""
    return _ready(r) and r.usable and r.run_id in smoke_ok


def _result(
    cid: str,
    status: str,
    reason: str,
    *,
    runs: Sequence[RunFacts] = (),
    value: float | None = None,
    threshold: float | None = None,
    ci: tuple[float | None, float | None] = (None, None),
    unit: str | None = None,
    mismatch: bool = False,
) -> CriterionResult:
    return CriterionResult(
        evaluation_id="",
        evaluated_at=datetime.min.replace(tzinfo=UTC),
        host="",
        verdict="",
        criterion=cid,
        name=CRITERIA[cid],
        required=False,
        status=status,
        value=value,
        threshold=threshold,
        ci_low=ci[0],
        ci_high=ci[1],
        unit=unit,
        evidence_run_ids=[r.run_id for r in runs],
        image_digests=sorted({r.image_digest for r in runs if r.image_digest}),
        quantization_mismatch=mismatch,
        reason=reason,
        first_held_at=None,
    )


def _stale_reason(what: str, stale: list[RunFacts], days: int) -> str:
    if stale:
        last = max(r.started_at for r in stale)
        return f"{what}: the latest ran {last:%Y-%m-%d}, older than the {days}-day freshness window"
    return f"{what}: none"
