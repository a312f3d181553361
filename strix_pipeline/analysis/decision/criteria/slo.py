"""C6: the owner's SLOs -- the candidate's goodput at the SLOs' load above the baseline's, with confidence.

Judged only when ``[decision.slo]`` is set (and then required). Goodput is requests per second meeting
every objective set (TTFT, TPOT, E2E per request; ``loadgen.metrics.meets_slo``), a failed or timed-out
request a miss. The load (``[decision.slo] load``, config.decision.SloLoad) is N clients (a sweep level),
an arrival rate (the sweep's open-loop level at it) or the decision's trace as it replays; the reason
names it. In a closed loop each of the N clients is always busy with one request, so by Little's law
goodput = N x (requests meeting the SLOs) / (the client time they all held), a failure holding its client
for the run's request timeout. In an open loop (a rate, a trace's recorded arrivals) requests come on
their own schedule: goodput = requests meeting the SLOs / the level's wall time. Its interval, and that
of the ratio of the two engines' goodput, is a percentile bootstrap over requests (stats.bootstrap,
seeded). Tokens/s per user -- the streaming speed a user sees, 1000 / TPOT, a failure 0 -- is shown
beside it, with its interval, and decides nothing.
When a Box's interleaved pairs measured goodput at the SLOs' load (runner/box_pairs.py), the
paired ratio decides instead: Student t across the pairs' log-ratios, the run-to-run variance in
its interval, the single runs shown beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

from strix_pipeline.analysis.decision.criteria.failures import failure_clause
from strix_pipeline.analysis.decision.criteria.pairing import (
    _measured_pair,
    _on_both_matchups,
    _quant_note,
    paired_comparison,
    pairs_interval,
)
from strix_pipeline.analysis.decision.criteria.runs import CONFIDENCE, _label, _result
from strix_pipeline.analysis.decision.evidence import (
    Evidence,
    PairedTtft,
    RequestOutcome,
    RunFacts,
    SweepReading,
)
from strix_pipeline.analysis.decision.matchup_table import ratio_text
from strix_pipeline.config import DecisionSLO, ScenarioProfile, SloLoad, StrixConfig
from strix_pipeline.loadgen.metrics import meets_slo, tpot_ms
from strix_pipeline.records import CriterionResult
from strix_pipeline.stats.bootstrap import ratio_of_ratios, ratio_of_sums

THRESHOLD = 1.0  # on the ratio candidate goodput / baseline goodput


def goodput_within_slos(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C6: the ratio candidate / baseline goodput at ``decision.slo_load``, with its interval, on
    both match-ups: pass when wholly above 1, fail when wholly below, unknown ("inconclusive")
    otherwise; a candidate failing more requests with confidence fails, saying so."""
    return _on_both_matchups(lambda matchup: _slo_on(ev, config, matchup), config)


def objectives_text(slo: DecisionSLO) -> str:
    """``TTFT <= 5000 ms, TPOT <= 500 ms``: the objectives set."""
    named = (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2E", slo.e2e_ms))
    return ", ".join(f"{name} <= {ms:g} ms" for name, ms in named if ms is not None)


def client_time(requests: Sequence[RequestOutcome], timeout_s: float | None) -> list[float]:
    """Seconds each request held its client: its E2E, a failure (or an E2E never recorded) the timeout."""
    timeout = timeout_s or ScenarioProfile().request_timeout_s
    return [q.e2e_ms / 1000 if q.ok and q.e2e_ms is not None else timeout for q in requests]


def user_speed(q: RequestOutcome) -> float | None:
    """Tokens/s one user sees while a request streams (1000 / TPOT); a failure 0; one token: none."""
    if not q.ok:
        return 0.0
    t = tpot_ms(q)
    return None if t is None or t <= 0 else 1000 / t


def _interval(point: float | None, lo: float | None, hi: float | None, unit: str) -> str:
    if point is None or point != point:  # nan: no requests
        return "n/a"
    ci = f" [{CONFIDENCE:.0%} CI {lo:.2f}-{hi:.2f}]" if lo is not None and hi is not None else ""
    return f"{point:.2f} {unit}{ci}"


def _formula(reading: SweepReading, load: SloLoad) -> str:
    if reading.level_kind == "rate":
        return "requests within the SLOs / the level's wall time (arrivals on their own schedule)"
    n = load.clients if load.kind == "concurrency" and load.clients else reading.level
    return f"{n} clients x requests within the SLOs / the client time they held (a failure the timeout)"


def load_text(load: SloLoad, reading: SweepReading | None) -> str:
    """The load as measured: ``5 clients``, ``2.5 requests/s (open loop)``, or a trace's replay as it ran
    (its recorded arrivals, or its clients)."""
    if load.kind != "trace" or reading is None:
        return load.text()
    if reading.level_kind == "rate":
        return "the trace's recorded arrivals (open loop)"
    return f"the trace's replay at {reading.level} clients"


def goodput_sums(
    requests: Sequence[RequestOutcome],
    slo: DecisionSLO,
    timeout_s: float | None,
    *,
    open_loop: bool,
    clients: int,
    wall_s: float | None,
) -> tuple[list[float], list[float]]:
    """Per request, goodput's numerator and denominator terms: closed loop, (``clients`` x met, the
    client time it held); open loop (a rate, a trace's arrivals), (met, the level's wall time ``wall_s``
    -- its first send to its last completion -- / its requests)."""
    met = [float(meets_slo(q, slo)) for q in requests]
    if open_loop:
        wall = wall_s if wall_s else sum(client_time(requests, timeout_s))
        return met, [wall / len(requests)] * len(requests)
    return [clients * m for m in met], client_time(requests, timeout_s)


def _side(
    requests: Sequence[RequestOutcome], r: RunFacts, slo: DecisionSLO, reading: SweepReading, load: SloLoad
) -> tuple[list, list, str]:
    """Goodput's sums per request (:func:`goodput_sums`) and the side's figures in words."""
    good, held = goodput_sums(
        requests,
        slo,
        r.request_timeout_s,
        open_loop=reading.level_kind == "rate",
        clients=load.clients if load.kind == "concurrency" and load.clients else reading.level or 1,
        wall_s=reading.duration_s,
    )
    speeds = [s for s in (user_speed(q) for q in requests) if s is not None]
    goodput = _interval(*ratio_of_sums(good, held, CONFIDENCE), "req/s")
    per_user = _interval(*ratio_of_sums(speeds, [1.0] * len(speeds), CONFIDENCE), "tok/s per user")
    met = sum(meets_slo(q, slo) for q in requests)
    return good, held, f"goodput {goodput}, {met}/{len(requests)} within the SLOs, {per_user}"


def _slo_on(ev: Evidence, config: StrixConfig, matchup: str) -> CriterionResult:
    d = config.decision
    slo, load = d.slo, d.slo_load
    assert slo is not None  # judged only with SLOs set (verdict.assess)

    def measured(runs: list[RunFacts]) -> list[RunFacts]:
        return [
            r for r in runs if ev.fresh(r) and r.run_id in ev.slo_sweep and ev.slo_sweep[r.run_id].requests
        ]

    found = _measured_pair(
        "C6",
        ev,
        config,
        measured,
        lambda r: r.run_id in ev.slo_sweep,
        f"requests at {load.text()}",
        f"run at {load.text()}",
        matchup,
    )
    if isinstance(found, CriterionResult):
        return found
    c, b, paired = found
    c_req, b_req = list(ev.slo_requests.get(c.run_id, ())), list(ev.slo_requests.get(b.run_id, ()))
    worse, failed = failure_clause(ev.slo_sweep[c.run_id], ev.slo_sweep[b.run_id], d.baseline_engine)
    c_read, b_read = ev.slo_sweep[c.run_id], ev.slo_sweep[b.run_id]
    head = f"SLOs {objectives_text(slo)} at {load_text(load, c_read)}"
    if not c_req or not b_req:
        status = "fail" if worse else "unknown"
        verdict = failed if worse else "no measured requests of a run stored: no goodput (n/a)"
        return _result("C6", status, f"{verdict}; {head}{paired}", runs=[c, b])
    c_good, c_held, c_text = _side(c_req, c, slo, c_read, load)
    b_good, b_held, b_text = _side(b_req, b, slo, b_read, load)
    ratio, lo, hi = ratio_of_ratios((c_good, c_held), (b_good, b_held), CONFIDENCE)
    if ratio is None:  # the baseline met the SLOs with no request
        status, verdict = (
            ("pass", f"{d.baseline_engine} meets them with no request, the candidate with some")
            if sum(c_good)
            else ("fail", "neither engine meets them with any request")
        )
    else:
        ci = f"goodput ratio {ratio_text(ratio)}, {CONFIDENCE:.0%} CI {ratio_text(lo)}-{ratio_text(hi)}"
        if lo is not None and lo > THRESHOLD:
            status, verdict = "pass", f"{ci}, wholly above {ratio_text(THRESHOLD)}: more within the SLOs"
        elif hi is not None and hi < THRESHOLD:
            status, verdict = "fail", f"{ci}, wholly below {ratio_text(THRESHOLD)}: fewer within the SLOs"
        else:
            status, verdict = "unknown", f"inconclusive: {ci} contains {ratio_text(THRESHOLD)}"
    by_pairs = paired_comparison(ev.paired_goodput, matchup, c, b)
    if isinstance(by_pairs, PairedTtft) and by_pairs.low is not None and by_pairs.high is not None:
        # the interleaved pairs decide; the two single runs' goodput is shown beside them
        status, verdict = _goodput_by_pairs(by_pairs)
        ratio, lo, hi = by_pairs.ratio, by_pairs.low, by_pairs.high
        head = f"beside them, the single runs: {head}"
    elif isinstance(by_pairs, str):
        paired += f"; {by_pairs}"
    if worse:
        status, verdict = "fail", f"{failed}; {verdict}"
    reason = (
        f"{verdict}; {head}: candidate {c_text} ({_label(c)}) vs {d.baseline_engine} {b_text} ({_label(b)}); "
        f"goodput = {_formula(c_read, load)}, {CONFIDENCE:.0%} percentile bootstrap over requests; "
        f"{failed}{_quant_note(c, b)}{paired}"
    )
    return _result(
        "C6",
        status,
        reason,
        runs=[c, b],
        value=ratio,
        threshold=THRESHOLD,
        ci=(lo, hi),
        unit="ratio",
        mismatch=c.quantization != b.quantization,
    )


def _goodput_by_pairs(p: PairedTtft) -> tuple[str, str]:
    """C6's status and verdict on the interleaved pairs: their paired goodput ratio's interval against 1."""
    ci = f"{pairs_interval(p, 'goodput ')} of each run's goodput within the SLOs)"
    if p.low is not None and p.low > THRESHOLD:
        return "pass", f"{ci}, wholly above {ratio_text(THRESHOLD)}: more within the SLOs"
    if p.high is not None and p.high < THRESHOLD:
        return "fail", f"{ci}, wholly below {ratio_text(THRESHOLD)}: fewer within the SLOs"
    return "unknown", f"inconclusive {ci}: it contains {ratio_text(THRESHOLD)}"
