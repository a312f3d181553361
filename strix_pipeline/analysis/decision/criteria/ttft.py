"""C3: the candidate's TTFT p95 at the decision concurrency below the baseline's, with confidence."""

from __future__ import annotations

import numpy as np

from strix_pipeline.analysis.decision.criteria.failures import failure_clause
from strix_pipeline.analysis.decision.criteria.pairing import (
    BY_PAIRS,
    _measured_pair,
    _on_both_matchups,
    _quant_note,
    _run_ci,
    paired_comparison,
    pairs_interval,
)
from strix_pipeline.analysis.decision.criteria.runs import (
    CONFIDENCE,
    _candidate_runs,
    _family,
    _label,
    _result,
)
from strix_pipeline.analysis.decision.evidence import Evidence, PairedTtft, RunFacts, SweepReading
from strix_pipeline.analysis.decision.matchup_table import matchup_name, ratio_text
from strix_pipeline.config import ScenarioProfile, StrixConfig
from strix_pipeline.records import CriterionResult
from strix_pipeline.stats.quantiles import (
    censored,
    min_samples_for_ratio_ci,
    quantile_name,
    quantile_ratio_ci,
)

# C3's quantile, and the measured requests per run its interval of the ratio needs (86): a decision
# level planned with fewer is refused when the configuration is loaded (config_load)
C3_QUANTILE = 95
C3_MIN_REQUESTS = min_samples_for_ratio_ci(C3_QUANTILE, CONFIDENCE)


def ttft_p95_beats_llamacpp_at_5(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C3: the ratio candidate / baseline TTFT p95 at the decision concurrency, with confidence, on
    both match-ups (:func:`_on_both_matchups`).

    Its 95 % interval comes from both runs' raw TTFTs (:func:`quantile_ratio_ci`, distribution-free):
    pass when wholly below 1 - margin, fail when wholly above, unknown ("inconclusive") otherwise --
    also when a run has too few requests for the interval to exist. A failed or timed-out request
    counts as the run's request timeout (censored, never dropped), and a candidate failing more
    requests than the baseline with confidence (:func:`failure_clause`) fails, whatever the ratio.
    """
    return _on_both_matchups(lambda matchup: _ttft_on(ev, config, matchup), config)


def _ttft_on(ev: Evidence, config: StrixConfig, matchup: str) -> CriterionResult:
    d = config.decision
    n = d.concurrency

    def measured(runs: list[RunFacts]) -> list[RunFacts]:
        return [
            r
            for r in runs
            if ev.fresh(r)
            and r.run_id in ev.sweep
            and ev.sweep[r.run_id].requests_ok > 0
            and ev.sweep[r.run_id].ttft_p95_ms is not None
        ]

    cand = _candidate_runs(ev, config)
    tried = [r for r in cand if ev.fresh(r) and r.run_id in ev.sweep]
    if not measured(cand) and tried:
        return _result("C3", "fail", f"every request failed at {n} clients on the candidate", runs=tried)
    found = _measured_pair(
        "C3",
        ev,
        config,
        measured,
        lambda r: r.run_id in ev.sweep,
        f"a {n}-client sweep",
        f"run at {n} clients",
        matchup,
    )
    if isinstance(found, CriterionResult):
        return found
    c, b, paired = found
    ca, ba = ev.sweep[c.run_id], ev.sweep[b.run_id]
    c_ttft, b_ttft = _censored_ttfts(ev, c), _censored_ttfts(ev, b)
    c_p95, b_p95 = _p95(c_ttft, ca), _p95(b_ttft, ba)
    threshold = 1 - d.ttft_margin_pct / 100  # on the ratio candidate p95 / baseline p95
    ratio = c_p95 / b_p95 if b_p95 else None
    lo, hi = quantile_ratio_ci(c_ttft, b_ttft, C3_QUANTILE, CONFIDENCE)
    need = C3_MIN_REQUESTS
    numbers = (
        f"TTFT p95 at {n} clients {c_p95:.0f} ms [95 % CI {_run_ci(c_ttft)}, n={len(c_ttft)}] "
        f"({_label(c)}) vs {d.baseline_engine} {b_p95:.0f} ms [95 % CI {_run_ci(b_ttft)}, "
        f"n={len(b_ttft)}] ({_label(b)}); ratio {ratio_text(ratio)}"
    )
    if lo is None or hi is None:
        status = "unknown"
        verdict = (
            f"inconclusive: too few requests for an interval of the ratio (n/a; it needs >= {need} "
            f"measured requests at {n} clients per run)"
        )
    else:
        ci = f"{CONFIDENCE:.0%} CI {ratio_text(lo)}-{ratio_text(hi)}"
        if hi < threshold:
            status, verdict = "pass", f"{ci}, wholly below {ratio_text(threshold)}: faster with confidence"
        elif lo > threshold:
            status, verdict = (
                "fail",
                f"{ci}, wholly above {ratio_text(threshold)}: not faster, with confidence",
            )
        else:
            status, verdict = "unknown", f"inconclusive: {ci} contains {ratio_text(threshold)}"
    worse, failed = failure_clause(ca, ba, d.baseline_engine)
    by_pairs = _paired_ttft(ev, matchup, c, b)
    if isinstance(by_pairs, PairedTtft) and by_pairs.low is not None and by_pairs.high is not None:
        # the interleaved pairs decide; the two single runs are shown beside them
        status, verdict = _by_pairs(by_pairs, threshold)
        ratio, lo, hi = by_pairs.ratio, by_pairs.low, by_pairs.high
        numbers = f"beside them, the single runs: {numbers}"
    elif by_pairs is not None:
        paired += f"; {by_pairs if isinstance(by_pairs, str) else _no_interval(by_pairs)}"
    else:
        paired += (
            f"; two single runs: no fresh comparison of the {matchup_name(matchup)} by interleaved pairs "
            f"on {c.host or config.decision.host}"
        )
    if worse:
        status, verdict = "fail", f"{failed}; {verdict}"
    reason = f"{verdict}; {numbers}, family {_family(c, config)}; {failed}{_quant_note(c, b)}{paired}"
    return _result(
        "C3",
        status,
        reason,
        runs=[c, b],
        value=ratio,
        threshold=threshold,
        ci=(lo, hi),
        unit="ratio",
        mismatch=c.quantization != b.quantization,
    )


def _censored_ttfts(ev: Evidence, r: RunFacts) -> list[float]:
    """The run's measured TTFTs, a failed or timed-out request counted as its request timeout."""
    timeout_s = r.request_timeout_s or ScenarioProfile().request_timeout_s
    return censored(list(ev.ttfts.get(r.run_id, ())), timeout_s * 1000)


def _p95(ttfts: list[float], reading: SweepReading) -> float:
    """The p95 of the censored TTFTs (linear interpolation, as the aggregates'); without raw requests
    the stored aggregate's, over the successful ones (then there is no interval either)."""
    if ttfts:
        return float(np.percentile(ttfts, C3_QUANTILE))
    return reading.ttft_p95_ms or 0.0  # measured: never None here


def _paired_ttft(ev: Evidence, matchup: str, c: RunFacts, b: RunFacts) -> PairedTtft | str | None:
    """The match-up's comparison of TTFT p95 by interleaved pairs (:func:`paired_comparison`)."""
    return paired_comparison(ev.paired_ttft, matchup, c, b)


def _by_pairs(p: PairedTtft, threshold: float) -> tuple[str, str]:
    """C3's status and verdict on the interleaved pairs: the paired ratio's interval against the threshold.

    The interval is Student's t across the pairs' log-ratios (stats/paired.compare), so the variance
    between runs is in it; its level is the one the ladder's look spent (96.25-99.55 % at 10 pairs'
    cap), said as such, and each run's percentile is named for what its request count estimates."""
    what = quantile_name(C3_QUANTILE, p.requests_per_run)
    of = (
        f"{what} of {p.requests_per_run} TTFT requests a run"
        if p.requests_per_run
        else f"{what} of each run (its request count not stored)"
    )
    ci = f"{pairs_interval(p, '')} of the runs' {of})"
    if p.high is not None and p.high < threshold:
        return "pass", f"{ci}, wholly below {ratio_text(threshold)}: faster with confidence"
    if p.low is not None and p.low > threshold:
        return "fail", f"{ci}, wholly above {ratio_text(threshold)}: not faster, with confidence"
    return "unknown", f"inconclusive {ci}: it contains {ratio_text(threshold)}"


def decided_by_pairs(r: CriterionResult) -> bool:
    """C3 decided on the interleaved pairs (:func:`_by_pairs`), not on two single runs."""
    head = r.reason.removeprefix("inconclusive ").split(";", 1)[0]
    return r.criterion == "C3" and head.startswith("by ") and BY_PAIRS in head


def _no_interval(p: PairedTtft) -> str:
    return f"its interleaved pairs ({p.comparison_id}) reached no interval ({p.pairs} pairs kept)"
