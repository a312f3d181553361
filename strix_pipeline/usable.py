"""What makes one run's evidence usable: the rules behind the benchmark asset's checks.

A run that measured nothing is never a success, whatever else it recorded: its failure is a result
(stored with its reason), but no check passes on it. A ``deferred`` run (it did not fit the maintenance
window, runner/docker_run.py) is neither: no check passes on it, and :func:`deferred` lets a check say so
as a warning, not a failure.
"""

from __future__ import annotations

from strix_pipeline.config import StrixConfig, rate_level
from strix_pipeline.records import RunResult
from strix_pipeline.units import gib_text

DEFERRED = "deferred"
# still going at the restore's time (planning/deadline.py): stopped, its engine removed, production
# restored on time; what it measured before is kept, but it is a failure with its reason
DEADLINE = "deadline"


def deferred(result: RunResult) -> bool:
    """The run was put off to the next window before anything was pulled or stopped."""
    return result.run.status == DEFERRED


def measured_ok(result: RunResult) -> int:
    """Successful measured requests (warm-up excluded), as the aggregates count them."""
    return sum(a.requests_ok for a in result.aggregates)


def memory_back(result: RunResult) -> tuple[bool, str]:
    """Memory in use returned to the idle baseline after the engine stopped; a missing reading is
    "unknown" and fails, as a check that passes on missing data checks nothing."""
    run = result.run
    if deferred(result):
        return False, f"deferred, nothing ran: {run.failure_reason}"
    seen = f"baseline {gib_text(run.baseline_bytes)}, after stop {gib_text(run.after_stop_bytes)}"
    if run.memory_returned is None:
        return False, f"unknown: no reading to compare ({seen})"
    if run.memory_returned:
        return True, f"back at baseline ({seen})"
    return False, f"NOT back at baseline ({seen})"


def served(result: RunResult) -> tuple[bool, str]:
    """The engine started and served at least one measured request; else why not, in words."""
    run = result.run
    if run.status == "cancelled":  # what it measured before the cancel is kept, but it is no success
        return False, f"the run was {run.failure_reason or 'cancelled'}"
    if deferred(result):
        return False, f"deferred, nothing ran: {run.failure_reason}"
    if run.status == DEADLINE:
        return False, f"the run was {run.failure_reason or 'stopped at its deadline'}"
    ok = measured_ok(result)
    if ok:
        return True, f"{ok} measured request(s) succeeded ({run.status})"
    if run.status in ("failed_start", "failed_guard"):
        what = "the engine did not start" if run.status == "failed_start" else "a guard refused the run"
    else:
        what = "the engine served no request"
    return False, f"{what}: {run.failure_reason or 'NO REASON RECORDED'}"


def completeness(config: StrixConfig, result: RunResult) -> tuple[bool, str]:
    """Every level of every scenario has its requests, or the run records why it has none."""
    run = result.run
    if run.status == "cancelled" or deferred(result):
        return False, f"run {run.status}: {run.failure_reason or 'NO REASON RECORDED'}"
    if measured_ok(result) == 0:
        return False, f"run {run.status}, nothing measured: {run.failure_reason or 'NO REASON RECORDED'}"
    if run.status.startswith("failed") or run.status == "error":
        return bool(run.failure_reason), f"run {run.status}: {run.failure_reason or 'NO REASON RECORDED'}"
    profile = config.profiles[run.profile]
    expected = {"smoke": profile.smoke.requests}
    sweep = profile.concurrency_sweep
    for level in sweep.levels:
        expected[f"concurrency_sweep@{level}"] = sweep.requests_for(level)
    for rate in sweep.rates:  # the open-loop levels, stored at their requests per minute
        expected[f"concurrency_sweep@{rate_level(rate)}"] = sweep.requests_per_level
    missing: list[str] = []
    notes: list[str] = []
    seen = {f"{a.scenario}@{a.level}" if a.scenario != "smoke" else "smoke": a for a in result.aggregates}
    for key, n in expected.items():
        if key not in profile.scenarios and key.split("@")[0] not in profile.scenarios:
            continue
        a = seen.get(key)
        # a level the suite cut short records why on its own aggregate (e.g. "stopped at max duration
        # 60s after 3/8 requests"): a recorded reason, not missing data
        if a is None:
            missing.append(f"{key}: no aggregate")
            continue
        done = a.requests_ok + a.requests_failed
        if a.requests_planned is not None and a.requests_planned != n:
            missing.append(
                f"{key}: the suite planned {a.requests_planned} requests, the profile asks for {n}"
            )
        elif done < n and not a.stopped_reason:
            missing.append(f"{key}: {done} of {n} requests, no reason recorded")
        elif done < n:
            notes.append(f"{key}: {done} of {n} requests ({a.stopped_reason})")
    for s in profile.scenarios:
        if s not in ("smoke", "concurrency_sweep") and not any(a.scenario == s for a in result.aggregates):
            missing.append(f"{s}: no aggregate")
    if missing:
        return False, "; ".join(missing + notes)
    if notes:
        return True, "; ".join(notes)
    return True, f"{len(result.aggregates)} levels, all with their requests"
