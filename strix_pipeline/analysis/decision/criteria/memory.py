"""C5: the candidate holds no more memory than the baseline, on the same context."""

from __future__ import annotations

from strix_pipeline.analysis.decision.criteria.pairing import (
    _measured_pair,
    _on_both_matchups,
    _quant_note,
    paired_comparison,
    pairs_interval,
)
from strix_pipeline.analysis.decision.criteria.runs import (
    _baseline_runs,
    _candidate_runs,
    _context,
    _family,
    _label,
    _ready,
    _result,
)
from strix_pipeline.analysis.decision.evidence import Evidence, PairedTtft, RunFacts
from strix_pipeline.analysis.decision.matchup_table import ratio_text
from strix_pipeline.config import StrixConfig
from strix_pipeline.memory.summary import MEMORY_UNRELIABLE
from strix_pipeline.records import CriterionResult
from strix_pipeline.units import gib_text


def _unreliable_memory(ev: Evidence, config: StrixConfig, unknown: CriterionResult) -> CriterionResult:
    """C5 without a pair: when a fresh run that reached ready has no held figure because its counters
    contradicted each other (runner/record.py), the reason says so, with the run and the numbers."""
    doubted = [
        r
        for r in _candidate_runs(ev, config) + _baseline_runs(ev, config)
        if ev.fresh(r)
        and _ready(r)
        and r.held_bytes is None
        and MEMORY_UNRELIABLE in (r.failure_reason or "")
    ]
    if unknown.status != "unknown" or not doubted:
        return unknown
    r = max(doubted, key=lambda x: x.started_at)
    why = (r.failure_reason or "").split(MEMORY_UNRELIABLE, 1)[1].lstrip(": ").split("; ")[0]
    return _result(
        "C5",
        "unknown",
        f"{unknown.reason}; {MEMORY_UNRELIABLE} on {r.engine} run {r.run_id} ({_label(r)}): {why}",
        runs=doubted,
    )


# Two KV caches hold "the same context" when their token capacities differ by no more than this share
# (vLLM rounds its cache up to whole blocks and sliding-window groups; llama-server's is exactly -c)
SAME_CONTEXT_TOLERANCE = 0.10


def _breakdown(r: RunFacts) -> str:
    """ " (weights 0.50 / KV 0.30 / other 4.20 GiB, KV for 16,384 tokens)": what the engine's own log
    says it allocated, the rest being the held figure minus both; empty when the log gave nothing."""
    held = r.held_bytes or 0
    parts = []
    if r.weights_bytes is not None or r.kv_cache_bytes is not None:
        other = held - (r.weights_bytes or 0) - (r.kv_cache_bytes or 0)
        parts.append(
            f"weights {gib_text(r.weights_bytes, 2, unknown='not in its log')} / "
            f"KV {gib_text(r.kv_cache_bytes, 2, unknown='not in its log')} / other {gib_text(other, 2)}"
        )
    if r.kv_capacity_tokens is not None:
        parts.append(f"KV for {r.kv_capacity_tokens:,} tokens")
    return f" ({', '.join(parts)})" if parts else ""


def _same_context_note(c: RunFacts, b: RunFacts) -> str:
    """Whether both KV caches hold the same tokens (the question C5 asks), when both runs say."""
    ct, bt = c.kv_capacity_tokens, b.kv_capacity_tokens
    if ct is None or bt is None:
        return ""
    if abs(ct - bt) <= SAME_CONTEXT_TOLERANCE * max(ct, bt):
        return "; at the same context"
    return (
        f"; not at the same context ({ct:,} vs {bt:,} KV tokens): a configuration's "
        "difference, not an engine's"
    )


def _production_pool_note(c: RunFacts) -> str:
    """The pool production's configuration holds, beside the same-context figures: the KV cache on
    the CPU backend, the whole pool (weights, activations and KV: the fraction x the device total)
    on a GPU -- so "pool", not "KV pool"."""
    if c.production_pool_bytes is None or c.production_pool_bytes == c.kv_cache_bytes:
        return ""
    return f"; production's pool as configured: {gib_text(c.production_pool_bytes, 2)}"


def memory_not_above_llamacpp(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C5: the candidate holds no more after load than the baseline (within the tolerance), on both
    match-ups (:func:`_on_both_matchups`)."""
    return _on_both_matchups(lambda matchup: _memory_on(ev, config, matchup), config)


def _memory_on(ev: Evidence, config: StrixConfig, matchup: str) -> CriterionResult:
    d = config.decision

    def measured(runs: list[RunFacts]) -> list[RunFacts]:
        return [r for r in runs if ev.fresh(r) and _ready(r) and r.held_bytes is not None]

    found = _measured_pair(
        "C5",
        ev,
        config,
        measured,
        lambda r: r.held_bytes is not None,
        "held memory",
        "memory reading",
        matchup,
    )
    if isinstance(found, CriterionResult):
        return _unreliable_memory(ev, config, found)
    c, b, paired = found
    c_held, b_held = c.held_bytes or 0, b.held_bytes or 0  # both measured: never None here
    threshold = b_held * (1 + d.memory_tolerance_pct / 100)
    ctx = ""
    cc, bc = _context(c, config), _context(b, config)
    if cc and bc and cc != bc:
        ctx = f"; context lengths differ ({cc} vs {bc})"
    reason = (
        f"held after load {gib_text(c_held, 1)} ({_label(c)}){_breakdown(c)} vs {d.baseline_engine} "
        f"{gib_text(b_held, 1)} ({_label(b)}){_breakdown(b)}{_same_context_note(c, b)}"
        f"{_production_pool_note(c)}, family {_family(c, config)}{ctx}{_quant_note(c, b)}{paired}"
    )
    by_pairs = paired_comparison(ev.paired_memory, matchup, c, b)
    if isinstance(by_pairs, PairedTtft) and by_pairs.low is not None and by_pairs.high is not None:
        # the interleaved pairs decide; the two single runs are shown beside them
        limit = 1 + d.memory_tolerance_pct / 100
        status, verdict = _memory_by_pairs(by_pairs, limit, d.baseline_engine)
        return _result(
            "C5",
            status,
            f"{verdict}; beside them, the single runs: {reason}",
            runs=[c, b],
            value=by_pairs.ratio,
            threshold=limit,
            ci=(by_pairs.low, by_pairs.high),
            unit="ratio",
            mismatch=c.quantization != b.quantization,
        )
    if isinstance(by_pairs, str):
        reason += f"; {by_pairs}"
    return _result(
        "C5",
        "pass" if c_held <= threshold else "fail",
        reason,
        runs=[c, b],
        value=float(c_held),
        threshold=float(threshold),
        unit="bytes",
        mismatch=c.quantization != b.quantization,
    )


def _memory_by_pairs(p: PairedTtft, limit: float, baseline: str) -> tuple[str, str]:
    """C5's status and verdict on the interleaved pairs: the paired ratio of held memory (candidate over
    baseline) against 1 + the tolerance. Memory barely varies between runs of one build, so the
    interval is narrow and a pass needs all of it at or below the limit."""
    ci = f"{pairs_interval(p, 'held memory ')} of each run's memory held after load)"
    assert p.low is not None and p.high is not None
    if p.high <= limit:
        return "pass", f"{ci}, wholly at or below {ratio_text(limit)}: holds no more than {baseline}"
    if p.low > limit:
        return "fail", f"{ci}, wholly above {ratio_text(limit)}: holds more than {baseline}"
    return "unknown", f"inconclusive {ci}: it contains {ratio_text(limit)}"
