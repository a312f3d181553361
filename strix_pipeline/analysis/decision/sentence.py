"""The week's answer in one sentence a person can act on: the verdict, the criterion that decided it,
its figure with the interval, and what would change it. Pure: a :class:`.Decision` and how
to name its two sides (:class:`Wording`).

One definition for every place the answer is read: the report's page and its Atom entry, the
``switch_decision`` asset's metadata and the webhook. A stored evaluation carries no ``reason`` (the
warehouse keeps its criteria), so the sentence is built from the criteria alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strix_pipeline.analysis.decision.outcome import Decision
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import CriterionResult
from strix_pipeline.units import GIB, gib_text

# the engines as their users name them (the config's keys are the kinds' short names)
ENGINE_NAMES = {"llamacpp": "llama-server", "vllm": "vLLM", "sglang": "SGLang"}
# which criterion's evidence names the candidate's version: the comparison's first (its runs are
# [candidate, baseline]), else a criterion of candidate runs alone
VERSION_FROM = ("C3", "C5", "C1", "C2", "C4")
REASON_CHARS = 180  # a reason quoted in the sentence; the criteria rows show it whole


@dataclass(frozen=True)
class Wording:
    """How the sentence names the decision's sides and settings."""

    candidate_engine: str = "the candidate"
    baseline_engine: str = "the baseline"
    candidate_version: str | None = None  # of the run the evidence rests on
    concurrency: int = 5
    medium_moe: str = "the medium MoE model"
    gpt_oss: str = "gpt-oss-120b"
    memory_tolerance_pct: float = 0.0  # C5's: the baseline's held memory times (1 + this / 100) is allowed

    @property
    def candidate(self) -> str:
        return (
            f"{self.candidate_engine} {self.candidate_version}"
            if self.candidate_version
            else self.candidate_engine
        )


def engine_name(engine: str) -> str:
    return ENGINE_NAMES.get(engine, engine)


def wording_of(config: StrixConfig, decision: Decision | None, versions: Mapping[str, str | None]) -> Wording:
    """The decision's wording from the config and ``versions`` (run id -> image version)."""
    d = config.decision
    version = None
    by_id = {c.criterion: c for c in decision.criteria} if decision else {}
    for cid in VERSION_FROM:
        c = by_id.get(cid)
        if c is not None and c.evidence_run_ids and versions.get(c.evidence_run_ids[0]):
            version = versions[c.evidence_run_ids[0]]
            break
    return Wording(
        candidate_engine=engine_name(d.candidate_engine),
        baseline_engine=engine_name(d.baseline_engine),
        candidate_version=version,
        concurrency=d.concurrency,
        medium_moe=d.medium_moe_model,
        gpt_oss=d.gpt_oss_model,
        memory_tolerance_pct=d.memory_tolerance_pct,
    )


def criterion_title(cid: str, w: Wording) -> str:
    """What each criterion asks, in words (its code name is :data:`.criteria.CRITERIA`'s)."""
    return {
        "C1": "the official image starts",
        "C2": f"serves {w.medium_moe}",
        "C3": f"TTFT p95 at {w.concurrency} clients below {w.baseline_engine}'s",
        "C4": f"serves {w.gpt_oss} from MXFP4",
        "C5": f"memory held not above {w.baseline_engine}'s",
        "C6": f"goodput within the owner's SLOs above {w.baseline_engine}'s",
    }.get(cid, cid)


def ratio_x(v: float, against: float | None = None) -> str:
    """``2.9``: one decimal from 1 up, two below; two wherever one would read as ``against``."""
    text = f"{v:.1f}" if v >= 1 else f"{v:.2f}"
    if against is not None and v != against and text == f"{against:.1f}":
        text = f"{v:.2f}"
    return text


def interval_text(c: CriterionResult) -> str:
    """``95 % interval 2.6–3.3×``, or "" where there is none."""
    if c.ci_low is None or c.ci_high is None:
        return ""
    low, high = ratio_x(c.ci_low, c.threshold), ratio_x(c.ci_high, c.threshold)
    if len(low.split(".")[1]) != len(high.split(".")[1]):  # both bounds to the same decimals
        low, high = f"{c.ci_low:.2f}", f"{c.ci_high:.2f}"
    return f"95 % interval {low}–{high}×"


def _clip(text: str) -> str:
    if len(text) <= REASON_CHARS:
        return text
    return text[:REASON_CHARS].rsplit(" ", 1)[0] + " …"


def _ttft(c: CriterionResult, w: Wording, whose: str) -> str:
    """``vLLM 0.32.0's TTFT p95 at 5 clients is 2.9× llama-server's (95 % interval 2.6–3.3×)``."""
    if c.value is None:
        return (
            f"{whose} TTFT p95 at {w.concurrency} clients has no ratio to "
            f"{w.baseline_engine}'s ({_clip(c.reason)})"
        )
    ci = interval_text(c)
    return (
        f"{whose} TTFT p95 at {w.concurrency} clients is {ratio_x(c.value, c.threshold)}× "
        f"{w.baseline_engine}'s" + (f" ({ci})" if ci else "")
    )


def held_text(v: float | None) -> str:
    """Memory held: two decimals under 1 GiB (0.48 GiB, not 0.5), one above."""
    return "–" if v is None else gib_text(v, 2 if v < GIB else 1)


def baseline_held(c: CriterionResult, w: Wording) -> float | None:
    """C5's baseline figure: its threshold is the baseline's held memory times (1 + the tolerance)."""
    if c.threshold is None:
        return None
    return c.threshold / (1 + w.memory_tolerance_pct / 100)


def allowed_text(c: CriterionResult, w: Wording) -> str:
    """What C5's threshold is, in words: the baseline's own held memory (plus the tolerance, if any)."""
    base = baseline_held(c, w)
    own = f"{w.baseline_engine}'s own {held_text(base)}"
    if not w.memory_tolerance_pct:
        return f"C5 allows no more than {own}"
    return f"C5 allows {held_text(c.threshold)}: {own} plus the {w.memory_tolerance_pct:g} % tolerance"


def memory_ratio_words(c: CriterionResult, w: Wording) -> str:
    """``13× llama-server's memory at the same context``; "" without both figures."""
    base = baseline_held(c, w)
    if c.value is None or not base:
        return ""
    # the criterion's reason says whether both KV caches hold the same tokens (criteria/memory.py)
    same = " at the same context" if "; at the same context" in c.reason else ""
    return f"{ratio_x(c.value / base, 1.0)}× {w.baseline_engine}'s memory{same}"


def _memory(c: CriterionResult, w: Wording) -> str:
    ratio = memory_ratio_words(c, w)
    held = f"it holds {held_text(c.value)} after load"
    return f"{held}, {ratio} ({allowed_text(c, w)})" if ratio else f"{held} ({allowed_text(c, w)})"


def _failure(c: CriterionResult, w: Wording, *, why: bool = True) -> str:
    """A failed criterion as a clause: its figure where it has one, else (``why``) its reason."""
    if c.criterion == "C3":
        return _ttft(c, w, f"{w.candidate}'s") + " (C3)"
    if c.criterion == "C5" and c.unit == "bytes" and c.value is not None and c.threshold is not None:
        return _memory(c, w)
    fails = f"{c.criterion} ({criterion_title(c.criterion, w)}) fails"
    return f"{fails}: {_clip(c.reason)}" if why else fails


def _needs(cs: list[CriterionResult], *, ratio_is: str = "C3's ratio") -> str:
    """What the failed criteria need: C3's ratio below its threshold, the others to pass."""
    parts = [
        f"{ratio_is} below {ratio_x(c.threshold)}×"
        for c in cs
        if c.criterion == "C3" and c.threshold is not None and c.value is not None
    ]
    others = [c.criterion for c in cs if c.criterion not in ("C3",) or c.threshold is None or c.value is None]
    if others:
        parts.append(f"{' and '.join(others)} to pass")
    return " and ".join(parts)


def _inconclusive(c: CriterionResult) -> bool:
    """C3 measured with an interval that holds its threshold: more of the same run decides it."""
    return c.criterion == "C3" and c.ci_low is not None and c.ci_high is not None


def evidence_wanted(c: CriterionResult, w: Wording) -> str:
    """The run that would give an unknown criterion its evidence."""
    n, cand, base = w.concurrency, w.candidate_engine, w.baseline_engine
    if c.criterion == "C3" and c.value is not None:  # measured, too few requests for an interval
        return f"runs with more measured requests at {n} clients on both engines"
    return {
        "C1": f"a run of the newest official {cand} release image",
        "C2": f"a {cand} run of {w.medium_moe} with a valid smoke answer",
        "C3": f"{cand} and {base} runs of the {n}-client sweep, same model family",
        "C4": f"a {cand} run of {w.gpt_oss} from its MXFP4 weights",
        "C5": f"{cand} and {base} runs with memory readings",
        "C6": f"{cand} and {base} runs of the sweep at the SLOs' load, same model family",
    }.get(c.criterion, "a fresh run")


def _unknown(unknown: list[CriterionResult], w: Wording, host: str) -> str:
    """Which criteria lack evidence and what would give it (one missing: its reason too)."""
    parts = []
    for c in (c for c in unknown if _inconclusive(c)):
        thr = f" contains {ratio_x(c.threshold)}×" if c.threshold is not None else ""
        figure = _ttft(c, w, f"{w.candidate}'s").removesuffix(")") + f"{thr})"
        parts.append(
            f"C3 is inconclusive: {figure}; more measured requests at {w.concurrency} clients on both "
            "engines would narrow the interval"
        )
    missing = [c for c in unknown if not _inconclusive(c)]
    if len(missing) == 1:
        c = missing[0]
        parts.append(
            f"{c.criterion} ({criterion_title(c.criterion, w)}) has no fresh evidence ({_clip(c.reason)}); "
            f"{evidence_wanted(c, w)} on {host} would give it"
        )
    elif missing:
        ids = ", ".join(c.criterion for c in missing[:-1]) + f" and {missing[-1].criterion}"
        runs = "; ".join(f"{evidence_wanted(c, w)} ({c.criterion})" for c in missing)
        parts.append(f"{ids} have no fresh evidence; on {host}, {runs} would give it")
    return "; ".join(parts)


# the answer's first words per verdict: a person reads yes or no there; the verdicts' names keep
# their meaning in the data ("evaluate": C1-C3 pass, something else fails -- not yet)
HEADLINES = {"switch": "Switch:", "evaluate": "Not yet:", "stay": "Stay:", "unknown": "Can't tell yet:"}


def headline(verdict: str | None) -> str:
    """The plain answer's first words for ``verdict`` (None: no evaluation yet)."""
    return HEADLINES.get(verdict or "unknown", HEADLINES["unknown"])


def change_needed(d: Decision, w: Wording) -> str:
    """What would change the answer, as a clause: what switching needs (stay, not yet), what would
    give the evidence (can't tell yet), or what would take a switch back."""
    required = [c for c in d.criteria if c.required]
    failed = [c for c in required if c.status == "fail"]
    unknown = [c for c in required if c.status == "unknown"]
    if d.verdict == "switch":
        if d.provisional:
            return "a repeat run or the next version has to agree before the switch is final"
        return f"it would stay on {w.baseline_engine} if a required criterion failed"
    if d.verdict == "unknown" and unknown:
        return "; ".join(f"{evidence_wanted(c, w)} on {d.host} ({c.criterion})" for c in unknown)
    if failed:
        first = failed[0]
        ratio_is = "it" if d.verdict == "stay" and first.criterion == "C3" and first.value else "C3's ratio"
        return f"switching needs {_needs(failed, ratio_is=ratio_is)}"
    return ""


def verdict_sentence(d: Decision, w: Wording) -> str:
    """The decision as one sentence (see the module docstring), opening with :func:`headline`."""
    required = [c for c in d.criteria if c.required]
    failed = [c for c in required if c.status == "fail"]
    unknown = [c for c in required if c.status == "unknown"]
    c3 = next((c for c in required if c.criterion == "C3"), None)
    base, cand = w.baseline_engine, w.candidate
    whose = f"{cand}'s"
    word = headline(d.verdict)
    if d.verdict == "unknown":
        if not unknown:
            return f"{word} no required criterion was evaluated on {d.host}."
        return f"{word} {_unknown(unknown, w, d.host)}."
    if d.verdict == "stay" and failed:
        first = failed[0]  # C1 or C2 when either failed (the verdict's first branch), else C3
        if first.criterion == "C3" and first.value is not None:
            return (
                f"{word} keep {base}. {_cap(_ttft(first, w, whose))}; "
                f"switching needs {_needs(failed, ratio_is='it')}."
            )
        return f"{word} keep {base}. {_cap(_failure(first, w))}; switching needs {_needs(failed)}."
    faster = f" and {_ttft(c3, w, 'its')}" if c3 is not None and c3.value is not None else ""
    if d.verdict == "evaluate" and failed:
        # C1-C3 passed: what failed is named, its reason is in the criteria rows
        fails = " and ".join(_failure(c, w, why=False) for c in failed)
        return (
            f"{word} stay on {base} for now. {cand} starts{faster}, but {fails}; "
            f"switching needs {_needs(failed)}."
        )
    if d.verdict == "switch":
        head = f"{word} move to {cand}" + (", provisionally" if d.provisional else "")
        passes = f"Every required criterion passes{faster.replace(' and its', ', its')}"
        return f"{head}. {passes}; {change_needed(d, w)}."
    return f"Verdict on {d.host}: {d.label}."


def _cap(text: str) -> str:
    """A clause as a sentence: "it holds" -> "It holds"; an engine's name keeps its spelling (vLLM)."""
    return text[:1].upper() + text[1:] if text.split(" ", 1)[0] in ("it", "its") else text


def no_evaluation_sentence(host: str, w: Wording) -> str:
    """The answer before the first evaluation of ``host``."""
    return (
        f"{headline(None)} {host} has no evaluation yet; runs of {w.candidate_engine} and "
        f"{w.baseline_engine} on it and the switch decision would give one."
    )
