"""The switch decision: five criteria, each with its evidence, and a verdict (DESIGN.md "switch criteria").

Every criterion is pass, fail or unknown. Unknown means "no fresh evidence" and carries the reason; it
is never quietly turned into a pass or a fail. Evidence is taken from the decision host only, from
runs started within the freshness window before ``now`` (runs after ``now`` are ignored so a past
evaluation can be replayed).

Verdicts, in order: stay (a required C1 or C2 fails), unknown (a required criterion is unknown),
switch (every required criterion passes), evaluate (the required ones of C1-C3 pass, another fails),
stay otherwise (the candidate serves but is not faster).

C1 is about starting: a run that reached ready with no override (status ok, partial, or failed_serve:
ready, then served nothing or invalid output) passes it; serving is C2's and C4's evidence.

C3's statistics: the ratio candidate TTFT p95 / baseline TTFT p95 at the decision concurrency, with a
95 % interval computed from both runs' raw per-request TTFTs (table ``requests``):
:func:`strix_pipeline.loadgen.metrics.quantile_ratio_ci`, distribution-free (each run's
order-statistic interval at sqrt(95 %), divided), coverage >= 95 % whatever the latency distribution
(``benchmarks/ci_coverage.py``). C3 passes when the whole interval is below 1 - margin, fails when it
is wholly above, and is unknown ("inconclusive", with both numbers) otherwise -- also when a run has
too few requests for the interval to exist (n/a below 86 per run).

A `switch` is *provisional* until a second run agrees: the same criteria, evaluated without the
newest candidate run the verdict rests on, must also give `switch` (a repeat of that image, or the
previous version, stands behind it), as a change point on the newest version stays provisional.

An evaluation is reproducible: :func:`reproduce` re-runs a stored one at its ``evaluated_at`` from
the warehouse (runs that ended by then, images first seen by then, evaluations before it).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from strix_pipeline.config import StrixConfig
from strix_pipeline.loadgen.metrics import min_samples_for_ci, quantile_ci, quantile_ratio_ci
from strix_pipeline.records import CriterionResult

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

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
FORBIDDEN_IN_LAUNCH = "HSA_OVERRIDE_GFX_VERSION"  # C1 means "starts with no override"
GPT_OSS_QUANTIZATION = "MXFP4"

# Only the two engines the criteria compare, and nothing after `now` (the criteria ignore both): on five
# years of weekly runs of three engines this is a third fewer rows to turn into dicts. Likewise only the
# aggregates the criteria read (smoke, and the sweep at the decision concurrency).
# A run counts once it ended by `now` (its rows are loaded after it ends): what an evaluation at `now`
# could see, so a replay of it sees the same.
DECISION_RUNS_SQL = (
    "SELECT * FROM v_run_base WHERE host = ? AND started_at <= ? AND coalesce(ended_at, started_at) <= ? "
    "AND engine IN (?, ?)"
)
DECISION_AGGREGATES_SQL = """
SELECT run_id, scenario, level, requests_ok, requests_failed,
       ttft_p95_ms, ttft_p95_ci_low_ms, ttft_p95_ci_high_ms
FROM v_run_aggregates
WHERE host = ? AND engine IN (?, ?)
  AND (scenario = 'smoke' OR (scenario = 'concurrency_sweep' AND level = ?))
"""
DECISION_IMAGES_SQL = (
    "SELECT repository, tag, digest, floating, version, sort_key, gone FROM images "
    "WHERE engine = ? AND first_seen <= ?"
)
# The raw TTFTs C3's interval is computed from: the measured (not warm-up), successful requests.
DECISION_TTFT_SQL = """
SELECT ttft_ms FROM requests
WHERE run_id = ? AND scenario = 'concurrency_sweep' AND level = ? AND NOT warmup AND ok
  AND ttft_ms IS NOT NULL
ORDER BY request_index
"""
# Evaluations strictly before this one: a replay at a stored evaluated_at does not see itself.
DECISION_HISTORY_SQL = """
SELECT evaluation_id, evaluated_at, verdict, criterion, status
FROM decisions WHERE host = ? AND evaluated_at < ? ORDER BY evaluated_at
"""
CONFIDENCE = 0.95  # C3's interval of the ratio of the two p95s
READY_STATUSES = ("ok", "partial", "failed_serve")  # reached ready (failed_serve: then served nothing)


@dataclass
class Decision:
    verdict: str  # "switch" | "evaluate" | "stay" | "unknown"
    evaluation_id: str
    evaluated_at: datetime
    host: str
    criteria: list[CriterionResult]
    previous_verdict: str | None = None
    previous_statuses: dict[str, str] = field(default_factory=dict)  # criterion -> status last time
    reason: str = ""
    provisional: bool = False  # a `switch` that rests on one candidate run (see the module docstring)

    @property
    def label(self) -> str:
        """The verdict as a person reads it: ``switch (provisional)`` until a second run agrees."""
        return f"{self.verdict} (provisional)" if self.provisional else self.verdict

    @property
    def verdict_changed(self) -> bool:
        return self.previous_verdict is not None and self.previous_verdict != self.verdict

    def without_fresh_evidence(self, required: list[str]) -> list[CriterionResult]:
        """The required criteria that are unknown: no evidence inside the freshness window."""
        return [c for c in self.criteria if c.criterion in set(required) and c.status == "unknown"]

    def changed_criteria(self) -> list[tuple[str, str, str]]:
        """(criterion, before, now) for each criterion whose status moved since the last evaluation."""
        return [
            (c.criterion, self.previous_statuses[c.criterion], c.status)
            for c in self.criteria
            if c.criterion in self.previous_statuses and self.previous_statuses[c.criterion] != c.status
        ]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return json.loads(json.dumps(d, default=_json_default))


def _json_default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    raise TypeError(f"not JSON serialisable: {type(o)}")


# --------------------------------------------------------------------------------------------------
# Evidence gathering


@dataclass
class _Evidence:
    runs: list[dict[str, Any]]
    smoke_ok: set[str]
    sweep: dict[str, dict[str, Any]]  # run_id -> aggregate at the decision concurrency
    images: list[dict[str, Any]]
    now: datetime
    window_start: datetime
    ttfts: Any = None  # run_id -> the raw TTFTs at the decision concurrency (callable, cached)

    def fresh(self, r: dict[str, Any]) -> bool:
        return self.window_start <= r["started_at"] <= self.now


def _rows(wh: Warehouse, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    return list(wh.query_df(sql, params).iter_rows(named=True))


def _order(r: dict[str, Any]) -> tuple[str, datetime]:
    """Newest first when sorted in reverse: explicit version order, then the later run."""
    return (r["version_order"], r["started_at"])


def _norm_repo(repo: str | None) -> str:
    if not repo:
        return ""
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        repo = repo.removeprefix(prefix)
    return repo


def _label(r: dict[str, Any]) -> str:
    digest = (r.get("image_digest") or "")[:19]
    name = r.get("image_version") or r.get("image_tag") or "?"
    return f"{name} ({digest})" if digest else name


def _family(r: dict[str, Any], config: StrixConfig) -> str:
    if r.get("model_family"):
        return r["model_family"]
    prof = config.models.get(r["model_profile"])
    return prof.family if prof else r["model"]


def _context(r: dict[str, Any], config: StrixConfig) -> int | None:
    prof = config.models.get(r["model_profile"])
    return prof.context_length if prof else None


def _ready(r: dict[str, Any]) -> bool:
    """Reached ready with no override: C1's evidence (serving is C2's and C4's)."""
    # a run cancelled after its engine was up has a launch command (it is set once ready)
    ready = r["status"] in READY_STATUSES or (r["status"] == "cancelled" and r.get("launch_command"))
    return bool(ready) and FORBIDDEN_IN_LAUNCH not in (r.get("launch_command") or "")


def _served(r: dict[str, Any], smoke_ok: set[str]) -> bool:
    """Ready, answered (usable: ok or partial) and the smoke output was valid."""
    return _ready(r) and r["usable"] and r["run_id"] in smoke_ok


def _digests(runs: list[dict[str, Any]]) -> list[str]:
    return sorted({r["image_digest"] for r in runs if r.get("image_digest")})


def _result(
    cid: str,
    status: str,
    reason: str,
    *,
    runs: list[dict[str, Any]] = (),  # type: ignore[assignment]
    value: float | None = None,
    threshold: float | None = None,
    ci: tuple[float | None, float | None] = (None, None),
    unit: str | None = None,
    mismatch: bool = False,
) -> CriterionResult:
    runs = list(runs)
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
        evidence_run_ids=[r["run_id"] for r in runs],
        image_digests=_digests(runs),
        quantization_mismatch=mismatch,
        reason=reason,
        first_held_at=None,
    )


def _stale_reason(what: str, stale: list[dict[str, Any]], days: int) -> str:
    if stale:
        last = max(r["started_at"] for r in stale)
        return f"{what}: the latest ran {last:%Y-%m-%d}, older than the {days}-day freshness window"
    return f"{what}: none"


# --------------------------------------------------------------------------------------------------
# The criteria


def _c1(ev: _Evidence, cand: list[dict[str, Any]], config: StrixConfig) -> CriterionResult:
    d = config.decision
    sources = [s for s in config.engines[d.candidate_engine].images if s.official]
    if not sources:
        return _result(
            "C1", "unknown", f"engine {d.candidate_engine!r} has no official image source configured"
        )
    repos = {s.repository for s in sources} | {f"{s.registry}/{s.repository}" for s in sources}
    floating = {t for s in sources for t in s.floating}
    official = [
        r
        for r in cand
        if _norm_repo(r.get("image_repository")) in repos and r.get("image_tag") not in floating
    ]
    names = ", ".join(sorted(s.repository for s in sources))
    if not official:
        return _result("C1", "unknown", f"no run of an official {names} release image on host {d.host}")
    newest = max(official, key=_order)
    key = newest["version_order"]
    # The registry may know a newer release than anything benchmarked: that one is what C1 is about.
    released = [
        i
        for i in ev.images
        if _norm_repo(i["repository"]) in repos and not i["floating"] and not i["gone"] and i["sort_key"]
    ]
    if released:
        top = max(released, key=lambda i: i["sort_key"])
        if top["sort_key"] > key:
            return _result(
                "C1",
                "unknown",
                f"the newest official release {top['repository']}:{top['tag']} ({top['digest'][:19]}) "
                f"has no run on host {d.host} yet",
            )
    same = [r for r in official if r["version_order"] == key]
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
    attempts = [r for r in fresh if r["status"] not in NOT_A_START_ATTEMPT]
    if not attempts:
        return _result(
            "C1",
            "unknown",
            f"no fresh run of {_label(newest)} tried to start it on {d.host} "
            f"({', '.join(sorted({r['status'] for r in fresh}))})",
            runs=fresh,
        )
    fresh = attempts
    why = "; ".join(f"{r['status']}: {r.get('failure_reason') or 'no reason recorded'}" for r in fresh[-3:])
    return _result("C1", "fail", f"{_label(newest)} did not reach ready on {d.host} ({why})", runs=fresh)


def _newest_image_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    top = max(runs, key=_order)
    key = top["version_order"]
    return sorted(
        (r for r in runs if r["version_order"] == key),
        key=lambda r: r["started_at"],
    )


def _serves(ev: _Evidence, cand: list[dict[str, Any]], cid: str, profile: str, days: int) -> CriterionResult:
    """C2 / C4 shape: the newest image with a fresh run of `profile` returned valid smoke output."""
    of_model = [r for r in cand if r["model_profile"] == profile]
    fresh = [r for r in of_model if ev.fresh(r)]
    if not fresh:
        return _result(
            cid, "unknown", _stale_reason(f"candidate runs of model profile {profile!r}", of_model, days)
        )
    if cid == "C4":
        # "no conversion": only the published MXFP4 weights count
        native = [r for r in fresh if (r["quantization"] or "").upper() == GPT_OSS_QUANTIZATION]
        if not native:
            quants = ", ".join(sorted({r["quantization"] for r in fresh}))
            return _result(
                cid, "fail", f"{profile} ran only as {quants}, not the published MXFP4", runs=fresh
            )
        fresh = native
    image_runs = _newest_image_runs(fresh)
    served = [r for r in image_runs if _served(r, ev.smoke_ok)]
    if served:
        return _result(cid, "pass", f"{_label(served[-1])} served {profile}: smoke output valid", runs=served)
    why = "; ".join(
        f"{r['status']}" + (f": {r['failure_reason']}" if r.get("failure_reason") else ": smoke failed")
        for r in image_runs[-3:]
    )
    return _result(cid, "fail", f"{_label(image_runs[-1])} did not serve {profile} ({why})", runs=image_runs)


def _pair(
    cand: list[dict[str, Any]], base: list[dict[str, Any]], config: StrixConfig
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Newest candidate run that has a baseline run of the same model family; the latest such baseline."""
    for c in sorted(cand, key=_order, reverse=True):
        fam = _family(c, config)
        same = [b for b in base if _family(b, config) == fam]
        if same:
            return c, max(same, key=lambda b: b["started_at"])
    return None


def _measured_pair(
    cid: str,
    cand: list[dict[str, Any]],
    base: list[dict[str, Any]],
    c_ok: list[dict[str, Any]],
    b_ok: list[dict[str, Any]],
    has: Callable[[dict[str, Any]], bool],
    what: str,
    reading: str,
    config: StrixConfig,
) -> tuple[dict[str, Any], dict[str, Any]] | CriterionResult:
    """The candidate and baseline runs C3 / C5 compare (see ``_pair``) among the measured ones
    (``c_ok`` of ``cand``, ``b_ok`` of ``base``), or the "unknown" result saying which side has none:
    its runs that ``has`` the reading but are stale, or no such run at all; or no baseline ``reading``
    of the candidate's model family."""
    d = config.decision
    for side, runs, ok in (("candidate", cand, c_ok), (d.baseline_engine, base, b_ok)):
        if not ok:
            stale = [r for r in runs if has(r)]
            return _result(cid, "unknown", _stale_reason(f"{side} runs with {what}", stale, d.freshness_days))
    pair = _pair(c_ok, b_ok, config)
    if pair is None:
        fams = ", ".join(sorted({_family(r, config) for r in c_ok}))
        return _result(cid, "unknown", f"no fresh {d.baseline_engine} {reading} of model family {fams}")
    return pair


def _quant_note(c: dict[str, Any], b: dict[str, Any]) -> str:
    if c["quantization"] == b["quantization"]:
        return ""
    return f"; quantizations differ ({c['quantization']} vs {b['quantization']})"


def _c3(
    ev: _Evidence, cand: list[dict[str, Any]], base: list[dict[str, Any]], config: StrixConfig
) -> CriterionResult:
    d = config.decision
    n = d.concurrency

    def measured(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            r
            for r in runs
            if ev.fresh(r)
            and r["run_id"] in ev.sweep
            and ev.sweep[r["run_id"]]["requests_ok"] > 0
            and ev.sweep[r["run_id"]]["ttft_p95_ms"] is not None
        ]

    c_ok = measured(cand)
    tried = [r for r in cand if ev.fresh(r) and r["run_id"] in ev.sweep]
    if not c_ok and tried:
        return _result("C3", "fail", f"every request failed at {n} clients on the candidate", runs=tried)
    pair = _measured_pair(
        "C3",
        cand,
        base,
        c_ok,
        measured(base),
        lambda r: r["run_id"] in ev.sweep,
        f"a {n}-client sweep",
        f"run at {n} clients",
        config,
    )
    if isinstance(pair, CriterionResult):
        return pair
    c, b = pair
    ca, ba = ev.sweep[c["run_id"]], ev.sweep[b["run_id"]]
    c_ttft, b_ttft = ev.ttfts(c["run_id"]), ev.ttfts(b["run_id"])
    threshold = 1 - d.ttft_margin_pct / 100  # on the ratio candidate p95 / baseline p95
    ratio = ca["ttft_p95_ms"] / ba["ttft_p95_ms"] if ba["ttft_p95_ms"] else None
    lo, hi = quantile_ratio_ci(c_ttft, b_ttft, 95, CONFIDENCE)
    need = min_samples_for_ci(95, CONFIDENCE**0.5)
    numbers = (
        f"TTFT p95 at {n} clients {ca['ttft_p95_ms']:.0f} ms [95 % CI {_run_ci(c_ttft)}, n={len(c_ttft)}] "
        f"({_label(c)}) vs {d.baseline_engine} {ba['ttft_p95_ms']:.0f} ms [95 % CI {_run_ci(b_ttft)}, "
        f"n={len(b_ttft)}] ({_label(b)}); ratio {_x(ratio)}"
    )
    if lo is None or hi is None:
        status = "unknown"
        verdict = (
            f"inconclusive: too few requests for an interval of the ratio (n/a; it needs >= {need} "
            f"measured requests at {n} clients per run)"
        )
    else:
        ci = f"{CONFIDENCE:.0%} CI {_x(lo)}-{_x(hi)}"
        if hi < threshold:
            status, verdict = "pass", f"{ci}, wholly below {_x(threshold)}: faster with confidence"
        elif lo > threshold:
            status, verdict = "fail", f"{ci}, wholly above {_x(threshold)}: not faster, with confidence"
        else:
            status, verdict = "unknown", f"inconclusive: {ci} contains {_x(threshold)}"
    failed = ""
    if ca["requests_failed"] or ba["requests_failed"]:
        failed = f"; failed requests {ca['requests_failed']} vs {ba['requests_failed']}"
    reason = f"{verdict}; {numbers}, family {_family(c, config)}{failed}{_quant_note(c, b)}"
    return _result(
        "C3",
        status,
        reason,
        runs=[c, b],
        value=ratio,
        threshold=threshold,
        ci=(lo, hi),
        unit="ratio",
        mismatch=c["quantization"] != b["quantization"],
    )


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _run_ci(ttfts: list[float]) -> str:
    lo, hi = quantile_ci(ttfts)
    return "n/a" if lo is None or hi is None else f"{lo:.0f}-{hi:.0f}"


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def _c5(
    ev: _Evidence, cand: list[dict[str, Any]], base: list[dict[str, Any]], config: StrixConfig
) -> CriterionResult:
    d = config.decision

    def measured(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in runs if ev.fresh(r) and _ready(r) and r.get("held_bytes") is not None]

    pair = _measured_pair(
        "C5",
        cand,
        base,
        measured(cand),
        measured(base),
        lambda r: r.get("held_bytes") is not None,
        "held memory",
        "memory reading",
        config,
    )
    if isinstance(pair, CriterionResult):
        return pair
    c, b = pair
    threshold = b["held_bytes"] * (1 + d.memory_tolerance_pct / 100)
    passed = c["held_bytes"] <= threshold
    ctx = ""
    cc, bc = _context(c, config), _context(b, config)
    if cc and bc and cc != bc:
        ctx = f"; context lengths differ ({cc} vs {bc})"
    reason = (
        f"held after load {_gib(c['held_bytes'])} ({_label(c)}) vs {d.baseline_engine} {_gib(b['held_bytes'])} "
        f"({_label(b)}), family {_family(c, config)}{ctx}{_quant_note(c, b)}"
    )
    return _result(
        "C5",
        "pass" if passed else "fail",
        reason,
        runs=[c, b],
        value=float(c["held_bytes"]),
        threshold=float(threshold),
        unit="bytes",
        mismatch=c["quantization"] != b["quantization"],
    )


# --------------------------------------------------------------------------------------------------
# Verdict and history


def verdict_of(statuses: dict[str, str], required: list[str]) -> tuple[str, str]:
    req = [c for c in CRITERIA if c in required]
    failed = [c for c in req if statuses.get(c) == "fail"]
    unknown = [c for c in req if statuses.get(c) == "unknown"]
    if any(c in failed for c in ("C1", "C2")):
        return "stay", f"{', '.join(c for c in failed if c in ('C1', 'C2'))} failed"
    if unknown:
        return "unknown", f"no fresh evidence for {', '.join(unknown)}"
    if not failed:
        return "switch", "every required criterion passes"
    if all(statuses.get(c) == "pass" for c in ("C1", "C2", "C3") if c in req):
        return "evaluate", f"C1-C3 pass; {', '.join(failed)} failed"
    return "stay", f"{', '.join(failed)} failed"


def _history(wh: Warehouse, host: str, now: datetime) -> list[dict[str, Any]]:
    try:
        return _rows(wh, DECISION_HISTORY_SQL, [host, now])
    except Exception:  # an older warehouse without decisions: no history yet
        return []


def _assess(
    runs: list[dict[str, Any]],
    aggs: list[dict[str, Any]],
    images: list[dict[str, Any]],
    ttfts: Any,
    config: StrixConfig,
    now: datetime,
) -> list[CriterionResult]:
    """The five criteria on this evidence (no history, no ids): a pure function of its inputs."""
    d = config.decision
    ev = _Evidence(
        runs=runs,
        smoke_ok={
            a["run_id"]
            for a in aggs
            if a["scenario"] == "smoke" and a["requests_ok"] >= 1 and a["requests_failed"] == 0
        },
        sweep={
            a["run_id"]: a
            for a in aggs
            if a["scenario"] == "concurrency_sweep" and a["level"] == d.concurrency
        },
        images=images,
        now=now,
        window_start=now - timedelta(days=d.freshness_days),
        ttfts=ttfts,
    )
    cand_all = [r for r in runs if r["engine"] == d.candidate_engine]
    base = [r for r in runs if r["engine"] == d.baseline_engine]
    # C2-C5 are about the official image when one is configured: a community build passing proves
    # nothing about the image the Box would switch to.
    sources = [s for s in config.engines[d.candidate_engine].images if s.official]
    repos = {s.repository for s in sources} | {f"{s.registry}/{s.repository}" for s in sources}
    cand = [r for r in cand_all if _norm_repo(r.get("image_repository")) in repos] if sources else cand_all

    results = [
        _c1(ev, cand_all, config),
        _serves(ev, cand, "C2", d.medium_moe_model, d.freshness_days),
        _c3(ev, cand, base, config),
        _serves(ev, cand, "C4", d.gpt_oss_model, d.freshness_days),
        _c5(ev, cand, base, config),
    ]
    if not cand_all:
        for r in results:
            if r.status == "unknown":
                r.reason = f"no {d.candidate_engine} run on host {d.host}: " + r.reason
    return results


def _provisional(
    results: list[CriterionResult],
    runs: list[dict[str, Any]],
    aggs: list[dict[str, Any]],
    ttfts: Any,
    config: StrixConfig,
    now: datetime,
) -> tuple[bool, str]:
    """Does a `switch` rest on one candidate run? (provisional, why).

    The same criteria without the newest candidate run the verdict cites must also give `switch`: a
    repeat of that image or the previous version agrees. (The registry's newer-release rule is left
    out of that second look: it is about today, and today's evaluation already passed it.)
    """
    d = config.decision
    by_id = {r["run_id"]: r for r in runs}
    cited = {
        rid
        for c in results
        if c.criterion in d.required
        for rid in c.evidence_run_ids
        if rid in by_id and by_id[rid]["engine"] == d.candidate_engine
    }
    if not cited:
        return False, ""
    newest = max(cited, key=lambda rid: by_id[rid]["started_at"])
    rest = [r for r in runs if r["run_id"] != newest]
    again = _assess(rest, aggs, [], ttfts, config, now)
    verdict, _ = verdict_of({r.criterion: r.status for r in again}, list(d.required))
    if verdict == "switch":
        return False, ""
    moved = ", ".join(r.criterion for r in again if r.criterion in d.required and r.status != "pass")
    return True, (
        f"provisional: rests on run {newest} alone (without it {moved or 'the verdict'} would not pass); "
        "a repeat run or the next version has to agree"
    )


def evaluate(
    wh: Warehouse,
    config: StrixConfig,
    *,
    now: datetime | None = None,
    evaluation_id: str | None = None,
) -> Decision:
    """Evaluate the five criteria on the decision host; nothing is written (see Warehouse.save_decision).

    Everything is read as it stood at ``now``: runs that ended by then, images first seen by then,
    evaluations before it. ``evaluation_id``: the id to give it (a replay keeps the stored one).
    """
    now = now or datetime.now(UTC)
    if now.tzinfo is None:  # the warehouse stores UTC-aware times; a naive `now` means UTC
        now = now.replace(tzinfo=UTC)
    d = config.decision
    runs = _rows(wh, DECISION_RUNS_SQL, [d.host, now, now, d.candidate_engine, d.baseline_engine])
    aggs = _rows(wh, DECISION_AGGREGATES_SQL, [d.host, d.candidate_engine, d.baseline_engine, d.concurrency])
    try:
        images = _rows(wh, DECISION_IMAGES_SQL, [d.candidate_engine, now])
    except Exception:
        images = []
    cache: dict[str, list[float]] = {}

    def ttfts(run_id: str) -> list[float]:
        if run_id not in cache:
            try:
                rows = _rows(wh, DECISION_TTFT_SQL, [run_id, d.concurrency])
            except Exception:  # a warehouse without raw requests: no interval (n/a)
                rows = []
            cache[run_id] = [float(r["ttft_ms"]) for r in rows]
        return cache[run_id]

    results = _assess(runs, aggs, images, ttfts, config, now)
    statuses = {r.criterion: r.status for r in results}
    verdict, why = verdict_of(statuses, list(d.required))
    provisional = False
    if verdict == "switch":
        provisional, note = _provisional(results, runs, aggs, ttfts, config, now)
        if provisional:
            why = f"{why}; {note}"

    history = _history(wh, d.host, now)
    evaluations: dict[str, dict[str, str]] = {}
    stamps: dict[str, datetime] = {}
    verdicts: dict[str, str] = {}
    for h in history:
        if h["evaluation_id"] == evaluation_id:
            continue
        evaluations.setdefault(h["evaluation_id"], {})[h["criterion"]] = h["status"]
        stamps[h["evaluation_id"]] = h["evaluated_at"]
        verdicts[h["evaluation_id"]] = h["verdict"]
    ordered = sorted(evaluations, key=lambda e: stamps[e])
    previous = ordered[-1] if ordered else None

    evaluation_id = evaluation_id or f"{d.host}-{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    for r in results:
        r.evaluation_id, r.evaluated_at, r.host, r.verdict = evaluation_id, now, d.host, verdict
        r.provisional = provisional
        r.required = r.criterion in d.required
        if not r.required and d.not_required_because:
            r.reason = f"not required on host {d.host}: {d.not_required_because} ({r.reason})"
        if r.status == "pass":
            # the start of the current unbroken run of passes
            held = now
            for e in reversed(ordered):
                if evaluations[e].get(r.criterion) != "pass":
                    break
                held = stamps[e]
            r.first_held_at = held
    return Decision(
        verdict=verdict,
        evaluation_id=evaluation_id,
        evaluated_at=now,
        host=d.host,
        criteria=results,
        previous_verdict=verdicts[previous] if previous else None,
        previous_statuses=dict(evaluations[previous]) if previous else {},
        reason=why,
        provisional=provisional,
    )


# The stored columns a replay must give back exactly (evaluation_id, evaluated_at and host are its key).
REPRODUCED_FIELDS = tuple(
    f for f in CriterionResult.__dataclass_fields__ if f not in ("evaluation_id", "evaluated_at", "host")
)


def stored_decision(wh: Warehouse, evaluation_id: str) -> Decision | None:
    """One stored evaluation, rebuilt from the decisions table (None: no such id)."""
    try:
        rows = _rows(
            wh, "SELECT * FROM decisions WHERE evaluation_id = ? ORDER BY criterion", [evaluation_id]
        )
    except Exception:
        return None
    return _decision_from_rows(rows) if rows else None


def _decision_from_rows(rows: list[dict[str, Any]]) -> Decision:
    fields = CriterionResult.__dataclass_fields__
    crits = [CriterionResult(**{k: r.get(k) for k in fields if k in r}) for r in rows]
    for c in crits:
        c.evidence_run_ids = list(c.evidence_run_ids or [])
        c.image_digests = list(c.image_digests or [])
        c.provisional = bool(c.provisional)
    first = rows[0]
    return Decision(
        verdict=first["verdict"],
        evaluation_id=first["evaluation_id"],
        evaluated_at=first["evaluated_at"],
        host=first["host"],
        criteria=crits,
        provisional=bool(first.get("provisional")),
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    if isinstance(a, datetime) and isinstance(b, datetime):
        return a.astimezone(UTC) == b.astimezone(UTC)
    return a == b


def decision_differences(stored: Decision, recomputed: Decision) -> list[str]:
    """What differs between a stored evaluation and its replay, field by field (empty: equal)."""
    diffs = []
    if stored.verdict != recomputed.verdict or stored.provisional != recomputed.provisional:
        diffs.append(f"verdict: stored {stored.label!r}, recomputed {recomputed.label!r}")
    old = {c.criterion: c for c in stored.criteria}
    new = {c.criterion: c for c in recomputed.criteria}
    for cid in sorted(old.keys() | new.keys()):
        if cid not in old or cid not in new:
            diffs.append(f"{cid}: only in the {'stored' if cid in old else 'recomputed'} evaluation")
            continue
        for f in REPRODUCED_FIELDS:
            a, b = getattr(old[cid], f), getattr(new[cid], f)
            if not _same(a, b):
                diffs.append(f"{cid}.{f}: stored {a!r}, recomputed {b!r}")
    return diffs


def reproduce(wh: Warehouse, config: StrixConfig, evaluation_id: str) -> tuple[Decision, Decision, list[str]]:
    """Recompute a stored evaluation from the warehouse: (stored, recomputed, differences).

    The replay runs on the stored host at the stored evaluated_at with the stored id, under the
    current config (a changed criterion setting shows up as a difference, as it should).
    Raises KeyError when no evaluation has that id.
    """
    stored = stored_decision(wh, evaluation_id)
    if stored is None:
        raise KeyError(evaluation_id)
    cfg = config
    if config.decision.host != stored.host:
        cfg = config.model_copy(update={"decision": config.decision.model_copy(update={"host": stored.host})})
    recomputed = evaluate(wh, cfg, now=stored.evaluated_at, evaluation_id=evaluation_id)
    return stored, recomputed, decision_differences(stored, recomputed)


def previous_decision(wh: Warehouse, host: str, *, before: datetime | None = None) -> Decision | None:
    """The last stored evaluation on `host` (before `before`), rebuilt from the decisions table."""
    sql = "SELECT * FROM decisions WHERE host = ? AND evaluated_at < ? ORDER BY evaluated_at DESC, criterion"
    try:
        rows = _rows(wh, sql, [host, before or datetime.now(UTC) + timedelta(days=1)])
    except Exception:
        return None
    if not rows:
        return None
    eid = rows[0]["evaluation_id"]
    mine = sorted((r for r in rows if r["evaluation_id"] == eid), key=lambda r: r["criterion"])
    return _decision_from_rows(mine)


# --------------------------------------------------------------------------------------------------
# Rendering


def format_value(v: float | None, unit: str | None) -> str:
    if v is None:
        return "–"
    if unit == "bytes":
        return _gib(v)
    if unit == "ms":
        return f"{v:.0f} ms"
    if unit == "ratio":
        return f"{v:.2f}x"
    return f"{v:g}"


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def decision_markdown(d: Decision) -> str:
    icon = {"pass": "✅ pass", "fail": "❌ fail", "unknown": "❔ unknown"}
    lines = [
        f"**Verdict: `{d.label}`** on host `{d.host}` — {d.reason} "
        f"(evaluated {d.evaluated_at:%Y-%m-%d %H:%M} UTC, id `{d.evaluation_id}`)",
    ]
    if d.previous_verdict is not None:
        moved = " — **changed**" if d.verdict_changed else ""
        lines.append(f"Previous verdict: `{d.previous_verdict}`{moved}")
    lines += [
        "",
        "| id | criterion | required | status | value | threshold | CI | quant. mismatch | first held | evidence | reason |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in d.criteria:
        ci = (
            f"{format_value(c.ci_low, c.unit)} – {format_value(c.ci_high, c.unit)}"
            if c.ci_low is not None and c.ci_high is not None
            else "–"
        )
        evidence = ", ".join(f"`{r}`" for r in c.evidence_run_ids) or "–"
        if c.image_digests:
            evidence += " · " + ", ".join(f"`{g[:19]}`" for g in c.image_digests)
        lines.append(
            "| "
            + " | ".join(
                [
                    c.criterion,
                    f"`{c.name}`",
                    "yes" if c.required else "no",
                    icon.get(c.status, c.status),
                    format_value(c.value, c.unit),
                    format_value(c.threshold, c.unit),
                    ci,
                    "⚠️ yes" if c.quantization_mismatch else "no",
                    f"{c.first_held_at:%Y-%m-%d}" if c.first_held_at else "–",
                    _esc(evidence),
                    _esc(c.reason),
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"
