"""The verdict from the criteria (five; C6 with SLOs set; C7 when both sides answered the evaluation
set), and whether a `switch` is provisional: pure, as the criteria.

The branches of :func:`verdict_of`, in order, are in the package docstring.
"""

from __future__ import annotations

from strix_pipeline.analysis.decision.criteria import CRITERIA, CRITERION_FUNCTIONS
from strix_pipeline.analysis.decision.criteria.ttft import decided_by_pairs
from strix_pipeline.analysis.decision.evidence import Evidence
from strix_pipeline.analysis.decision.outcome import Decision
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import CriterionResult


def assess(ev: Evidence, config: StrixConfig) -> list[CriterionResult]:
    """The criteria on this evidence (no history, no ids, nothing stamped): C1-C5, C6 when the owner set
    SLOs, and C7 when both engines answered the evaluation set (or it is listed as required)."""
    d = config.decision
    skipped = set() if d.slo is not None else {"C6"}
    if not answered_by_both(ev, config) and "C7" not in d.required:
        skipped.add("C7")
    results = [judge_one(ev, config) for cid, judge_one in CRITERION_FUNCTIONS.items() if cid not in skipped]
    if not any(r.engine == d.candidate_engine for r in ev.runs):
        for r in results:
            if r.status == "unknown":
                r.reason = f"no {d.candidate_engine} run on host {d.host}: " + r.reason
    return results


def answered_by_both(ev: Evidence, config: StrixConfig) -> bool:
    """Some run of each engine answered the evaluation set: C7 is judged (runs from before the set
    existed leave it out, as C6 is left out without SLOs)."""
    d = config.decision
    engines = {r.engine for r in ev.runs if ev.quality.get(r.run_id)}
    return {d.candidate_engine, d.baseline_engine} <= engines


def verdict_of(statuses: dict[str, str], required: list[str]) -> tuple[str, str]:
    """(verdict, why) from the criteria's statuses; the branches, in order, are the package docstring's."""
    req = [c for c in CRITERIA if c in required]
    failed = [c for c in req if statuses.get(c) == "fail"]
    unknown = [c for c in req if statuses.get(c) == "unknown"]
    if any(c in failed for c in ("C1", "C2")):
        return "stay", f"{', '.join(c for c in failed if c in ('C1', 'C2'))} failed"
    if unknown:
        return "unknown", f"no fresh evidence for {', '.join(unknown)}"
    if not failed:
        return "switch", "every required criterion passes"
    # the owner's SLOs (C6) weigh as C3 does: a candidate not better there is a stay, not an evaluate;
    # so do worse answers (C7): speed bought with wrong answers is no reason to look further
    if all(statuses.get(c) == "pass" for c in ("C1", "C2", "C3", "C6", "C7") if c in req):
        return "evaluate", f"C1-C3 pass; {', '.join(failed)} failed"
    return "stay", f"{', '.join(failed)} failed"


def provisional(results: list[CriterionResult], ev: Evidence, config: StrixConfig) -> tuple[bool, str]:
    """Does a `switch` rest on one candidate run? (provisional, why).

    The same criteria without the newest candidate run the verdict cites must also give `switch`: a
    repeat of that image or the previous version agrees. (The registry's newer-release rule is left
    out of that second look: it is about today, and today's evaluation already passed it.)
    """
    d = config.decision
    by_id = {r.run_id: r for r in ev.runs}
    cited = {
        rid
        for c in results
        if c.criterion in required_now(results, config)
        for rid in c.evidence_run_ids
        if rid in by_id and by_id[rid].engine == d.candidate_engine
    }
    if not cited:
        return False, ""
    newest = max(cited, key=lambda rid: by_id[rid].started_at)
    again = assess(ev.without_run(newest), config)
    verdict, _ = verdict_of({r.criterion: r.status for r in again}, required_now(again, config))
    if verdict == "switch":
        return False, ""
    again_required = required_now(again, config)
    moved = ", ".join(r.criterion for r in again if r.criterion in again_required and r.status != "pass")
    return True, (
        f"provisional: rests on run {newest} alone (without it {moved or 'the verdict'} would not pass); "
        "a repeat run or the next version has to agree"
    )


def on_single_runs(results: list[CriterionResult], required: list[str]) -> str:
    """Why a `switch` can be no better than provisional: the speed criterion (C3) decided on two single
    runs, hours apart, not on interleaved pairs of fresh runs (a slower hour of the host lands on one
    side only, and an interval over one run's requests leaves the run-to-run variance out); empty
    when the pairs decided or C3 is not required."""
    c3 = next((r for r in results if r.criterion == "C3"), None)
    if c3 is None or "C3" not in required or decided_by_pairs(c3):
        return ""
    return (
        "provisional: rests on single runs (C3 compared one run per engine, not interleaved pairs of fresh "
        "runs in one night); pairs of the baseline and the candidate have to agree"
    )


def required_now(results: list[CriterionResult], config: StrixConfig) -> list[str]:
    """The configured required criteria, and C7 when it was judged (both sides answered the
    evaluation set): worse answers always count, missing ones (runs older than the set) never block."""
    required = list(config.decision.required)
    judged = any(r.criterion == "C7" and r.status in ("pass", "fail") for r in results)
    return [*required, "C7"] if judged and "C7" not in required else required


def judge(ev: Evidence, config: StrixConfig) -> Decision:
    """The criteria, the verdict and whether it is provisional, stamped for the decision host at
    ``ev.now``; the evaluation id and the history (first held, previous verdict) are the caller's."""
    d = config.decision
    results = assess(ev, config)
    required = required_now(results, config)
    verdict, why = verdict_of({r.criterion: r.status for r in results}, required)
    is_provisional = False
    if verdict == "switch":
        is_provisional, note = provisional(results, ev, config)
        if is_provisional:
            why = f"{why}; {note}"
        if single := on_single_runs(results, required):
            is_provisional, why = True, f"{why}; {single}"
    for r in results:
        r.evaluated_at, r.host, r.verdict, r.provisional = ev.now, d.host, verdict, is_provisional
        r.required = r.criterion in required
        if not r.required and d.not_required_because and r.criterion != "C7":
            r.reason = f"not required on host {d.host}: {d.not_required_because} ({r.reason})"
    return Decision(
        verdict=verdict,
        evaluation_id="",
        evaluated_at=ev.now,
        host=d.host,
        criteria=results,
        reason=why,
        provisional=is_provisional,
    )
