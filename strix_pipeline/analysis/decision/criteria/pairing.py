"""The runs C3 and C5 compare, paired on purpose: the baseline run of the same host, model family,
backend and host state closest in time to the candidate's; a criterion judged on both match-ups, and
the other match-up's result in one clause."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta

from strix_pipeline.analysis.decision.criteria.runs import (
    CONFIDENCE,
    MATCHUPS,
    _baseline_runs,
    _candidate_runs,
    _family,
    _label,
    _order,
    _result,
    _stale_reason,
)
from strix_pipeline.analysis.decision.evidence import Evidence, PairedTtft, RunFacts, side_tag
from strix_pipeline.analysis.decision.matchup_table import matchup_name, ratio_text
from strix_pipeline.config import StrixConfig
from strix_pipeline.fingerprint import pair_differences
from strix_pipeline.planning.production_baseline import PRODUCTION_AS_DEPLOYED
from strix_pipeline.records import CriterionResult
from strix_pipeline.registry.names import normalize_repository
from strix_pipeline.stats.quantiles import quantile_ci
from strix_pipeline.units import gib_text

# how a criterion's reason names a decision on the interleaved pairs (and verdict.on_single_runs finds it)
BY_PAIRS = "interleaved pairs of fresh runs"


def _hours(gap: timedelta) -> str:
    return f"{abs(gap).total_seconds() / 3600:.1f} h"


def _backend(value: object) -> str:
    return f"{value} build" if value else "a build its image does not name"


def _same_weights(c: RunFacts, b: RunFacts) -> bool:
    return (c.quantization or "").upper() == (b.quantization or "").upper()


def _pair(
    cand: list[RunFacts],
    base: list[RunFacts],
    config: StrixConfig,
    base_name: str,
    reading: str,
    matchup: str = "production",
) -> tuple[RunFacts, RunFacts, str] | str:
    """The pair C3 / C5 compare, made on purpose: the newest candidate run (then the next) with a
    baseline run of the same model family, backend and host state (fingerprint.pair_differences), the
    one closest in time to it within ``decision.pair_within_hours`` ("the same night"). Returns the
    pair with a note for the reason (empty, or that another night's run stood in: the latest such one,
    only under ``decision.pair_other_night``), else why the newest candidate run has no pair. On the
    equal-weights ``matchup`` the baseline run also serves the candidate's quantization."""
    d = config.decision
    within = timedelta(hours=d.pair_within_hours)
    why: str | None = None
    for c in sorted(cand, key=_order, reverse=True):
        fam = _family(c, config)
        same = [
            b
            for b in base
            if _family(b, config) == fam and (matchup != "equal_weights" or _same_weights(c, b))
        ]
        if matchup == "equal_weights":
            fam = f"{fam} at the candidate's {c.quantization or 'unrecorded'} weights"
        alike = [b for b in same if not pair_differences(c, b)]
        tonight = [b for b in alike if abs(b.started_at - c.started_at) <= within]
        if tonight:
            # the nearest in time; of two as near, the later
            best = min(tonight, key=lambda b: (abs(b.started_at - c.started_at), -b.started_at.timestamp()))
            return c, best, ""
        if alike and d.pair_other_night:
            b = max(alike, key=lambda b: b.started_at)
            note = (
                f"; no {d.baseline_engine} run within {d.pair_within_hours:g} h of the candidate's: "
                f"run {b.run_id} of another night stands in ({_hours(b.started_at - c.started_at)} "
                "apart, decision.pair_other_night)"
            )
            return c, b, note
        if why is None:
            why = _no_pair(c, same, alike, fam, base_name, reading, d.pair_within_hours)
    return why or f"no fresh {base_name} {reading}"


def _no_pair(
    c: RunFacts,
    same: list[RunFacts],
    alike: list[RunFacts],
    fam: str,
    base_name: str,
    reading: str,
    hours: float,
) -> str:
    """Why the candidate run ``c`` has no pair: what each baseline run of its model family lacked."""
    if not same:
        return f"no fresh {base_name} {reading} of model family {fam}"
    lacks: dict[str, list[RunFacts]] = {}
    for b in same:
        diff = pair_differences(c, b)
        if "backend" in diff:
            lacks.setdefault("backend", []).append(b)
        elif diff:
            for name in diff:
                lacks.setdefault(name, []).append(b)
    parts = []
    for name, runs in lacks.items():
        theirs = sorted({str(pair_differences(c, b)[name][1] or "") for b in runs})
        mine = pair_differences(c, runs[0])[name][0]
        if name == "backend":
            said = f"{', '.join(_backend(v) for v in theirs)}; the candidate's {_backend(mine)}"
        else:
            said = (
                f"{', '.join(v or 'not recorded' for v in theirs)}; the candidate's {mine or 'not recorded'}"
            )
        parts.append(f"{len(runs)} of another {name} ({said})")
    if alike:
        nearest = min(alike, key=lambda b: abs(b.started_at - c.started_at))
        parts.append(
            f"{len(alike)} of another night (the nearest {_hours(nearest.started_at - c.started_at)} "
            f"from the candidate's, a pair within {hours:g} h; decision.pair_other_night lets it stand in)"
        )
    return (
        f"no fresh {base_name} {reading} paired with the candidate's run {c.run_id}, {_label(c)}: "
        f"of {len(same)} of model family {fam}, " + "; ".join(parts)
    )


def _paired_sides(
    ev: Evidence, config: StrixConfig, matchup: str = "production"
) -> tuple[list[RunFacts], list[RunFacts], str, str]:
    """The runs each side of C3 / C5 may take, with how each side is named in a reason: the
    candidate's of ``decision.candidate_model``, and the baseline's of production's image and model
    (``decision.baseline_image`` / ``baseline_model``) -- so the pair never follows whichever image or
    model ran last. On the equal-weights ``matchup`` the baseline is production's image serving any model
    profile (``_pair`` keeps the ones at the candidate's weights)."""
    d = config.decision
    cand, base = _candidate_runs(ev, config), _baseline_runs(ev, config)
    cand_name, base_name = "candidate", d.baseline_engine
    if d.candidate_model:
        cand = [r for r in cand if r.model_profile == d.candidate_model]
        cand_name = f"candidate (model {d.candidate_model})"
    production: list[str] = []
    if d.baseline_image:
        base = [r for r in base if _same_repository(d.baseline_image, r.image_repository)]
        production.append(f"image {d.baseline_image}")
    if d.baseline_model and matchup == "production":
        base = [r for r in base if r.model_profile == d.baseline_model]
        production.append(f"model {d.baseline_model}")
    if production:
        base_name = f"{d.baseline_engine} (production's {', '.join(production)})"  # the configured override
    elif matchup == "production" and (deployed := [r for r in base if r.baseline_source]):
        # no override: the runs of production as deployed, when there are any, are the baseline
        base = deployed
        base_name = f"{d.baseline_engine} ({PRODUCTION_AS_DEPLOYED})"
    if matchup == "equal_weights":
        base_name = f"{base_name} at the candidate's weights"
    return cand, base, cand_name, base_name


def _same_repository(configured: str, stored: str | None) -> bool:
    """A run's repository (stored without its registry) is the configured ``[registry/]repository``."""
    want, have = normalize_repository(configured), normalize_repository(stored)
    return bool(have) and (want == have or want.endswith("/" + have))


def _measured_pair(
    cid: str,
    ev: Evidence,
    config: StrixConfig,
    measured: Callable[[list[RunFacts]], list[RunFacts]],
    has: Callable[[RunFacts], bool],
    what: str,
    reading: str,
    matchup: str = "production",
) -> tuple[RunFacts, RunFacts, str] | CriterionResult:
    """The candidate and baseline runs C3 / C5 compare (see ``_pair``) among the ``measured`` ones,
    with the pair's note, or the "unknown" result saying which side has none: its runs that ``has``
    the reading but are stale, or no such run at all; or no baseline ``reading`` paired with the
    candidate's run, saying what each one lacked."""
    d = config.decision
    cand, base, cand_name, base_name = _paired_sides(ev, config, matchup)
    c_ok, b_ok = measured(cand), measured(base)
    for side, runs, ok in ((cand_name, cand, c_ok), (base_name, base, b_ok)):
        if not ok:
            stale = [r for r in runs if has(r)]
            return _result(cid, "unknown", _stale_reason(f"{side} runs with {what}", stale, d.freshness_days))
    found = _pair(c_ok, b_ok, config, base_name, reading, matchup)
    if isinstance(found, str):
        return _result(cid, "unknown", found)
    return found


def _quant_note(c: RunFacts, b: RunFacts) -> str:
    if c.quantization == b.quantization:
        return ""
    return f"; quantizations differ ({c.quantization} vs {b.quantization})"


def _run_ci(ttfts: list[float]) -> str:
    lo, hi = quantile_ci(ttfts)
    return "n/a" if lo is None or hi is None else f"{lo:.0f}-{hi:.0f}"


def _on_both_matchups(judge: Callable[[str], CriterionResult], config: StrixConfig) -> CriterionResult:
    """A criterion judged on each of :data:`MATCHUPS`: the result of the match-up ``decision.decided_by``
    names, carrying the other match-up's beside it (its own fields and a clause of the reason)."""
    decides = config.decision.decided_by
    other = next(m for m in MATCHUPS if m != decides)
    r, o = judge(decides), judge(other)
    r.matchup, r.other_matchup, r.other_status, r.other_reason = decides, other, o.status, o.reason
    r.other_value, r.other_threshold, r.other_ci_low, r.other_ci_high = (
        o.value,
        o.threshold,
        o.ci_low,
        o.ci_high,
    )
    r.other_run_ids = list(o.evidence_run_ids)
    beside = matchup_summary(o, same_runs=r.evidence_run_ids)
    r.reason = f"{r.reason}; beside it, the {matchup_name(other)}: {beside}"
    return r


def matchup_summary(o: CriterionResult, same_runs: Sequence[str] = ()) -> str:
    """The other match-up's result in one clause: its status and figures, or why it has none."""
    if o.status == "unknown" and o.value is None:
        return f"unknown ({o.reason})"
    if list(o.evidence_run_ids) == list(same_runs):
        return f"{o.status} on the same runs (production's format is the candidate's weights)"
    runs = f" (runs {', '.join(o.evidence_run_ids)})" if o.evidence_run_ids else ""
    if o.unit == "ratio":
        # an interval of interleaved pairs is at the level its look spent, said in its own reason
        by_pairs = BY_PAIRS in o.reason.split(";", 1)[0]
        label = "interval by interleaved pairs" if by_pairs else f"{CONFIDENCE:.0%} CI"
        ci = f", {label} {ratio_text(o.ci_low)}-{ratio_text(o.ci_high)}" if o.ci_low is not None else ""
        return f"{o.status}, ratio {ratio_text(o.value)}{ci}{runs}"
    if o.unit == "bytes":
        return f"{o.status}, held {gib_text(o.value, 1)} against {gib_text(o.threshold, 1)}{runs}"
    return f"{o.status}{runs}"


def paired_comparison(
    found: Mapping[str, PairedTtft], matchup: str, c: RunFacts, b: RunFacts
) -> PairedTtft | str | None:
    """The match-up's comparison by interleaved pairs when it ran the very releases and models of the runs
    the criterion compares (runner/engine_comparison.py, runner/box_pairs.py); else why it is not taken;
    None: there is none (fresh)."""
    got = found.get(matchup)
    if got is None:
        return None
    want = (
        side_tag(b.engine, b.image_version, b.model_profile),
        side_tag(c.engine, c.image_version, c.model_profile),
    )
    if (got.release_a, got.release_b) != want:
        return (
            f"not by its interleaved pairs ({got.comparison_id}: {got.release_b} against {got.release_a}): "
            f"they ran other releases or models than these runs ({want[1]} against {want[0]})"
        )
    return got


def pairs_interval(p: PairedTtft, what: str) -> str:
    """How a decision on interleaved pairs states its figure: the pairs, the paired ratio and its interval
    at the level it really has (Student t across the pairs' log-ratios, so the run-to-run variance is
    in it)."""
    return (
        f"by {p.pairs} {BY_PAIRS} ({p.comparison_id}): {what}ratio {ratio_text(p.ratio)}, interval "
        f"{ratio_text(p.low)}-{ratio_text(p.high)} at {p.level * 100:.2f} % (Student t across the pairs' "
        "log-ratios"
    )
