"""C7: the candidate answers the evaluation set no worse than the baseline on the same weights.

Speed is worth nothing if the answers change: every run answers the project's fixed evaluation set
(strix_pipeline/quality), and C7 compares the candidate's answers with the baseline's on the
equal-weights match-up -- the baseline serving the candidate's very weights, so what is left between
them is the engine -- item by item (McNemar's exact test, one-sided). A candidate that misses, with
confidence, items the baseline answers fails whatever its speed. Judged when both engines have
answers of the current set (runs from before the set existed leave it out), and then required when it
can be decided: a match-up without a pair of answered runs leaves it unknown and not required.
"""

from __future__ import annotations

from strix_pipeline.analysis.decision.criteria.pairing import _measured_pair
from strix_pipeline.analysis.decision.criteria.runs import _label, _result
from strix_pipeline.analysis.decision.evidence import Evidence, RunFacts
from strix_pipeline.config import StrixConfig
from strix_pipeline.quality.score import compare, score
from strix_pipeline.records import CriterionResult

MATCHUP = "equal_weights"  # the engine alone: the same weights on both sides
ALPHA = 0.05  # one-sided, on the items the two sides answer differently


def scores_not_below_baseline(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C7: pass unless the candidate answers fewer items of the set than the baseline with confidence
    (then fail, naming the items); unknown when a side has no answers of the current set."""
    d = config.decision

    def measured(runs: list[RunFacts]) -> list[RunFacts]:
        return [r for r in runs if ev.fresh(r) and ev.quality.get(r.run_id)]

    found = _measured_pair(
        "C7",
        ev,
        config,
        measured,
        lambda r: bool(ev.quality.get(r.run_id)),
        "answers of the evaluation set",
        "run that answered the evaluation set",
        MATCHUP,
    )
    if isinstance(found, CriterionResult):
        found.reason = f"not decided (so not required): {found.reason}"
        return found
    c, b, paired = found
    c_answers, b_answers = ev.quality[c.run_id], ev.quality[b.run_id]
    verdict = compare(b_answers, c_answers, ALPHA)
    c_score = score(sum(c_answers.values()), len(c_answers))
    b_score = score(sum(b_answers.values()), len(b_answers))
    status = "fail" if verdict.lower else "pass"
    missed = f" (misses {', '.join(verdict.lost)})" if verdict.lost else ""
    reason = (
        f"{verdict.text()}{missed}; candidate {c_score.text()} ({_label(c)}) vs {d.baseline_engine} "
        f"{b_score.text()} ({_label(b)}) on the same weights, item by item (McNemar exact, one-sided "
        f"alpha {ALPHA}){paired}"
    )
    return _result(
        "C7",
        status,
        reason,
        runs=[c, b],
        value=c_score.share - b_score.share,
        threshold=0.0,
        ci=(c_score.low - b_score.high, c_score.high - b_score.low),
        unit="score difference",
    )
