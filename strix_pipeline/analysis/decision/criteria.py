"""C1-C5 as pure functions of the evidence and the config: no SQL, no warehouse.

Each criterion is named as in :data:`CRITERIA` and judges :class:`.evidence.Evidence` alone; the
verdict on their results is :mod:`.verdict`'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from strix_pipeline.analysis.decision.evidence import Evidence, PairedTtft, RunFacts, side_tag
from strix_pipeline.analysis.decision.report import pair_name, ratio_text
from strix_pipeline.config import GFX_OVERRIDE, ImageSource, StrixConfig
from strix_pipeline.fingerprint import pair_differences
from strix_pipeline.memory.summary import MEMORY_UNRELIABLE
from strix_pipeline.records import CriterionResult
from strix_pipeline.registry.names import normalize_repository
from strix_pipeline.stats.quantiles import min_samples_for_ci, quantile_ci, quantile_ratio_ci
from strix_pipeline.units import gib_text

CRITERIA = {
    "C1": "official_image_starts",
    "C2": "serves_medium_moe",
    "C3": "ttft_p95_beats_llamacpp_at_5",
    "C4": "serves_gpt_oss_120b_mxfp4",
    "C5": "memory_not_above_llamacpp",
}
# A run stopped from outside before or while it started, or refused by a guard before anything
# started, says nothing about whether the engine starts: C1 neither passes nor fails on it.
NOT_A_START_ATTEMPT = frozenset({"cancelled", "failed_guard"})
FORBIDDEN_IN_LAUNCH = GFX_OVERRIDE  # C1 means "starts with no override"
GPT_OSS_QUANTIZATION = "MXFP4"
CONFIDENCE = 0.95  # C3's interval of the ratio of the two p95s
READY_STATUSES = ("ok", "partial", "failed_serve")  # reached ready (failed_serve: then served nothing)
# The two pairs C3 and C5 are judged on; decision.decided_by names the one the verdict takes. The
# production pair is each engine in its production format (the baseline as decision.baseline_model
# names it); the equal-weights pair is a baseline run at the candidate's own quantization -- the same
# weights -- so what is left between them is the engine.
PAIRS = ("production", "equal_weights")


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


# --------------------------------------------------------------------------------------------------
# The criteria


def official_image_starts(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C1: the newest official release reached ready on the host with no override."""
    d = config.decision
    cand = _all_candidate_runs(ev, config)
    sources = _official_sources(config)
    if not sources:
        return _result(
            "C1", "unknown", f"engine {d.candidate_engine!r} has no official image source configured"
        )
    repos = _repos(sources)
    floating = {t for s in sources for t in s.floating}
    official = [
        r for r in cand if normalize_repository(r.image_repository) in repos and r.image_tag not in floating
    ]
    names = ", ".join(sorted(s.repository for s in sources))
    if not official:
        return _result("C1", "unknown", f"no run of an official {names} release image on host {d.host}")
    newest = max(official, key=_order)
    key = newest.version_order
    # The registry may know a newer release than anything benchmarked: that one is what C1 is about.
    released = [
        i
        for i in ev.images
        if normalize_repository(i.repository) in repos and not i.floating and not i.gone and i.sort_key
    ]
    if released:
        top = max(released, key=lambda i: i.sort_key)
        if top.sort_key > key:
            return _result(
                "C1",
                "unknown",
                f"the newest official release {top.repository}:{top.tag} ({top.digest[:19]}) "
                f"has no run on host {d.host} yet",
            )
    same = [r for r in official if r.version_order == key]
    fresh = [r for r in same if ev.fresh(r)]
    if not fresh:
        return _result(
            "C1",
            "unknown",
            _stale_reason(f"runs of {_label(newest)}", same, d.freshness_days),
            runs=same[-1:],
        )
    ready = [r for r in fresh if _ready(r)]
    if ready:
        return _result("C1", "pass", f"{_label(ready[-1])} reached ready on {d.host}", runs=ready)
    overridden = [r for r in fresh if _override(r)]
    if overridden:
        r = overridden[-1]
        return _result(
            "C1",
            "fail",
            f"{_label(r)} started on {d.host} with {FORBIDDEN_IN_LAUNCH} in {_override(r)} (run {r.run_id}): "
            "C1 asks for a start with no override",
            runs=overridden,
        )
    attempts = [r for r in fresh if r.status not in NOT_A_START_ATTEMPT]
    if not attempts:
        return _result(
            "C1",
            "unknown",
            f"no fresh run of {_label(newest)} tried to start it on {d.host} "
            f"({', '.join(sorted({r.status for r in fresh}))})",
            runs=fresh,
        )
    why = "; ".join(f"{r.status}: {r.failure_reason or 'no reason recorded'}" for r in attempts[-3:])
    return _result("C1", "fail", f"{_label(newest)} did not reach ready on {d.host} ({why})", runs=attempts)


def _newest_image_runs(runs: list[RunFacts]) -> list[RunFacts]:
    key = max(runs, key=_order).version_order
    return sorted((r for r in runs if r.version_order == key), key=lambda r: r.started_at)


def _serves(ev: Evidence, config: StrixConfig, cid: str, profile: str) -> CriterionResult:
    """C2 / C4 shape: the newest image with a fresh run of `profile` returned valid smoke output."""
    of_model = [r for r in _candidate_runs(ev, config) if r.model_profile == profile]
    fresh = [r for r in of_model if ev.fresh(r)]
    if not fresh:
        return _result(
            cid,
            "unknown",
            _stale_reason(
                f"candidate runs of model profile {profile!r}", of_model, config.decision.freshness_days
            ),
        )
    if cid == "C4":
        # "no conversion": only the published MXFP4 weights count
        native = [r for r in fresh if (r.quantization or "").upper() == GPT_OSS_QUANTIZATION]
        if not native:
            quants = ", ".join(sorted({r.quantization for r in fresh}))
            return _result(
                cid, "fail", f"{profile} ran only as {quants}, not the published MXFP4", runs=fresh
            )
        fresh = native
    image_runs = _newest_image_runs(fresh)
    served = [r for r in image_runs if _served(r, ev.smoke_ok)]
    if served:
        return _result(cid, "pass", f"{_label(served[-1])} served {profile}: smoke output valid", runs=served)
    why = "; ".join(
        f"{r.status}" + (f": {r.failure_reason}" if r.failure_reason else ": smoke failed")
        for r in image_runs[-3:]
    )
    return _result(cid, "fail", f"{_label(image_runs[-1])} did not serve {profile} ({why})", runs=image_runs)


def serves_medium_moe(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C2: the newest official image with a fresh run of the medium MoE returned valid smoke output."""
    return _serves(ev, config, "C2", config.decision.medium_moe_model)


def serves_gpt_oss_120b_mxfp4(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C4: likewise gpt-oss-120b, from its published MXFP4 weights only."""
    return _serves(ev, config, "C4", config.decision.gpt_oss_model)


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
    pair: str = "production",
) -> tuple[RunFacts, RunFacts, str] | str:
    """The pair C3 / C5 compare, made on purpose: the newest candidate run (then the next) with a
    baseline run of the same model family, backend and host state (fingerprint.pair_differences), the
    one closest in time to it within ``decision.pair_within_hours`` ("the same night"). Returns the
    pair with a note for the reason (empty, or that another night's run stood in: the latest such one,
    only under ``decision.pair_other_night``), else why the newest candidate run has no pair. On the
    equal-weights ``pair`` the baseline run also serves the candidate's quantization."""
    d = config.decision
    within = timedelta(hours=d.pair_within_hours)
    why: str | None = None
    for c in sorted(cand, key=_order, reverse=True):
        fam = _family(c, config)
        same = [
            b for b in base if _family(b, config) == fam and (pair != "equal_weights" or _same_weights(c, b))
        ]
        if pair == "equal_weights":
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
    ev: Evidence, config: StrixConfig, pair: str = "production"
) -> tuple[list[RunFacts], list[RunFacts], str, str]:
    """The runs each side of C3 / C5 may take, with how each side is named in a reason: the
    candidate's of ``decision.candidate_model``, and the baseline's of production's image and model
    (``decision.baseline_image`` / ``baseline_model``) -- so the pair never follows whichever image or
    model ran last. On the equal-weights ``pair`` the baseline is production's image serving any model
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
    if d.baseline_model and pair == "production":
        base = [r for r in base if r.model_profile == d.baseline_model]
        production.append(f"model {d.baseline_model}")
    if production:
        base_name = f"{d.baseline_engine} (production's {', '.join(production)})"
    if pair == "equal_weights":
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
    pair: str = "production",
) -> tuple[RunFacts, RunFacts, str] | CriterionResult:
    """The candidate and baseline runs C3 / C5 compare (see ``_pair``) among the ``measured`` ones,
    with the pair's note, or the "unknown" result saying which side has none: its runs that ``has``
    the reading but are stale, or no such run at all; or no baseline ``reading`` paired with the
    candidate's run, saying what each one lacked."""
    d = config.decision
    cand, base, cand_name, base_name = _paired_sides(ev, config, pair)
    c_ok, b_ok = measured(cand), measured(base)
    for side, runs, ok in ((cand_name, cand, c_ok), (base_name, base, b_ok)):
        if not ok:
            stale = [r for r in runs if has(r)]
            return _result(cid, "unknown", _stale_reason(f"{side} runs with {what}", stale, d.freshness_days))
    found = _pair(c_ok, b_ok, config, base_name, reading, pair)
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


def _on_both_pairs(judge: Callable[[str], CriterionResult], config: StrixConfig) -> CriterionResult:
    """A criterion judged on each of :data:`PAIRS`: the result of the pair ``decision.decided_by``
    names, carrying the other pair's beside it (its own fields and a clause of the reason)."""
    decides = config.decision.decided_by
    other = next(p for p in PAIRS if p != decides)
    r, o = judge(decides), judge(other)
    r.pair, r.other_pair, r.other_status, r.other_reason = decides, other, o.status, o.reason
    r.other_value, r.other_threshold, r.other_ci_low, r.other_ci_high = (
        o.value,
        o.threshold,
        o.ci_low,
        o.ci_high,
    )
    r.other_run_ids = list(o.evidence_run_ids)
    r.reason = (
        f"{r.reason}; beside it, the {pair_name(other)}: {pair_summary(o, same_runs=r.evidence_run_ids)}"
    )
    return r


def pair_summary(o: CriterionResult, same_runs: Sequence[str] = ()) -> str:
    """The other pair's result in one clause: its status and figures, or why it has none."""
    if o.status == "unknown" and o.value is None:
        return f"unknown ({o.reason})"
    if list(o.evidence_run_ids) == list(same_runs):
        return f"{o.status} on the same runs (production's format is the candidate's weights)"
    runs = f" (runs {', '.join(o.evidence_run_ids)})" if o.evidence_run_ids else ""
    if o.unit == "ratio":
        ci = (
            f", {CONFIDENCE:.0%} CI {ratio_text(o.ci_low)}-{ratio_text(o.ci_high)}"
            if o.ci_low is not None
            else ""
        )
        return f"{o.status}, ratio {ratio_text(o.value)}{ci}{runs}"
    if o.unit == "bytes":
        return f"{o.status}, held {gib_text(o.value, 1)} against {gib_text(o.threshold, 1)}{runs}"
    return f"{o.status}{runs}"


def ttft_p95_beats_llamacpp_at_5(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C3: the ratio candidate / baseline TTFT p95 at the decision concurrency, with confidence, on
    both pairs (:func:`_on_both_pairs`).

    Its 95 % interval comes from both runs' raw TTFTs (:func:`quantile_ratio_ci`, distribution-free):
    pass when wholly below 1 - margin, fail when wholly above, unknown ("inconclusive") otherwise --
    also when a run has too few requests for the interval to exist.
    """
    return _on_both_pairs(lambda pair: _ttft_on(ev, config, pair), config)


def _ttft_on(ev: Evidence, config: StrixConfig, pair: str) -> CriterionResult:
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
        pair,
    )
    if isinstance(found, CriterionResult):
        return found
    c, b, paired = found
    ca, ba = ev.sweep[c.run_id], ev.sweep[b.run_id]
    c_p95, b_p95 = ca.ttft_p95_ms or 0.0, ba.ttft_p95_ms or 0.0  # both measured: never None here
    c_ttft, b_ttft = list(ev.ttfts.get(c.run_id, ())), list(ev.ttfts.get(b.run_id, ()))
    threshold = 1 - d.ttft_margin_pct / 100  # on the ratio candidate p95 / baseline p95
    ratio = c_p95 / b_p95 if b_p95 else None
    lo, hi = quantile_ratio_ci(c_ttft, b_ttft, 95, CONFIDENCE)
    need = min_samples_for_ci(95, CONFIDENCE**0.5)
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
    failed = ""
    if ca.requests_failed or ba.requests_failed:
        failed = f"; failed requests {ca.requests_failed} vs {ba.requests_failed}"
    by_pairs = _paired_ttft(ev, pair, c, b)
    if isinstance(by_pairs, PairedTtft) and by_pairs.low is not None and by_pairs.high is not None:
        # the interleaved pairs decide; the two single runs are shown beside them
        status, verdict = _by_pairs(by_pairs, threshold)
        ratio, lo, hi = by_pairs.ratio, by_pairs.low, by_pairs.high
        numbers = f"beside them, the single runs: {numbers}"
    elif by_pairs is not None:
        paired += f"; {by_pairs if isinstance(by_pairs, str) else _no_interval(by_pairs)}"
    else:
        paired += f"; two single runs: no fresh comparison of the {pair_name(pair)} by interleaved pairs on {c.host or config.decision.host}"  # fmt: skip
    reason = f"{verdict}; {numbers}, family {_family(c, config)}{failed}{_quant_note(c, b)}{paired}"
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


def _paired_ttft(ev: Evidence, pair: str, c: RunFacts, b: RunFacts) -> PairedTtft | str | None:
    """The pair's comparison by interleaved pairs when it ran the very releases and models of the runs
    C3 compares (runner/engine_pairs.py); else why it is not taken; None: there is none (fresh)."""
    got = ev.paired_ttft.get(pair)
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


def _by_pairs(p: PairedTtft, threshold: float) -> tuple[str, str]:
    """C3's status and verdict on the interleaved pairs: the paired ratio's interval against the threshold."""
    ci = f"by {p.pairs} interleaved pairs of fresh runs ({p.comparison_id}): ratio {ratio_text(p.ratio)}, interval {ratio_text(p.low)}-{ratio_text(p.high)}"  # fmt: skip
    if p.high is not None and p.high < threshold:
        return "pass", f"{ci}, wholly below {ratio_text(threshold)}: faster with confidence"
    if p.low is not None and p.low > threshold:
        return "fail", f"{ci}, wholly above {ratio_text(threshold)}: not faster, with confidence"
    return "unknown", f"inconclusive {ci}: it contains {ratio_text(threshold)}"


def _no_interval(p: PairedTtft) -> str:
    return f"its interleaved pairs ({p.comparison_id}) reached no interval ({p.pairs} pairs kept)"


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
    return f"; not at the same context ({ct:,} vs {bt:,} KV tokens): a configuration's difference, not an engine's"


def _production_pool_note(c: RunFacts) -> str:
    """The pool production's configuration holds, beside the same-context figures: the KV cache on
    the CPU backend, the whole pool (weights, activations and KV: the fraction x the device total)
    on a GPU -- so "pool", not "KV pool"."""
    if c.production_pool_bytes is None or c.production_pool_bytes == c.kv_cache_bytes:
        return ""
    return f"; production's pool as configured: {gib_text(c.production_pool_bytes, 2)}"


def memory_not_above_llamacpp(ev: Evidence, config: StrixConfig) -> CriterionResult:
    """C5: the candidate holds no more after load than the baseline (within the tolerance), on both
    pairs (:func:`_on_both_pairs`)."""
    return _on_both_pairs(lambda pair: _memory_on(ev, config, pair), config)


def _memory_on(ev: Evidence, config: StrixConfig, pair: str) -> CriterionResult:
    d = config.decision

    def measured(runs: list[RunFacts]) -> list[RunFacts]:
        return [r for r in runs if ev.fresh(r) and _ready(r) and r.held_bytes is not None]

    found = _measured_pair(
        "C5", ev, config, measured, lambda r: r.held_bytes is not None, "held memory", "memory reading", pair
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


# In CRITERIA's order; each function is named as its criterion (tests/unit/analysis/test_decision.py holds that).
CRITERION_FUNCTIONS: dict[str, Callable[[Evidence, StrixConfig], CriterionResult]] = {
    "C1": official_image_starts,
    "C2": serves_medium_moe,
    "C3": ttft_p95_beats_llamacpp_at_5,
    "C4": serves_gpt_oss_120b_mxfp4,
    "C5": memory_not_above_llamacpp,
}
