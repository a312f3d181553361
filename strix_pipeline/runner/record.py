"""How a run's outcome is recorded: the status from the suite, a cancellation's reason, the host and
image facts, the production outage, the memory summary."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from strix_pipeline.config import ScenarioProfile, StrixConfig
from strix_pipeline.engine_facts import append_firmware
from strix_pipeline.fingerprint import env_json, workload_digest
from strix_pipeline.hosts.box.production import ProductionGuard
from strix_pipeline.hosts.docker import engine as docker_engine
from strix_pipeline.hosts.probes import energy
from strix_pipeline.loadgen import SuiteInterrupted, SuiteResult
from strix_pipeline.memory import (
    MEMORY_UNRELIABLE,
    PAGE_SIZE,
    HostMemoryFacts,
    MemoryProbe,
    MemorySampler,
    counter_disagreements,
    meminfo_disagreement,
    summarize,
)
from strix_pipeline.memory.breakdown import parse_engine_log
from strix_pipeline.records import HARNESS_VERSION, RequestRecord, RunRecord, RunResult
from strix_pipeline.runner.efficiency import SWEEP, single_client_decode
from strix_pipeline.runner.target import BenchmarkTarget, Log
from strix_pipeline.traces.store import stored_digest
from strix_pipeline.units import GB, gib_text


def trace_digest(config: StrixConfig, profile: ScenarioProfile) -> str | None:
    """The stored content digest of the trace ``profile`` replays (None: it replays none, or the trace
    was never imported -- the run then says so and replays nothing)."""
    if profile.trace is None or "trace" not in profile.scenarios:
        return None
    return stored_digest(config.traces_dir(), profile.trace.name)


def new_record(
    config: StrixConfig, target: BenchmarkTarget, run_id: str, dagster_run_id: str | None
) -> RunRecord:
    """The record a run of ``target`` starts with (status ``error`` until it says otherwise); a night
    that defers a run stores one too (runner/night_hold.py)."""
    model = config.models[target.model]
    engine = config.engines[target.engine]
    profile = config.profiles[target.profile]
    image = target.image
    return RunRecord(
        run_id=run_id,
        host=target.host,
        engine=target.engine,
        engine_kind=engine.kind,
        image_repository=image.repository if image else None,
        image_tag=image.tag if image else None,
        image_digest=image.digest if image else None,
        model_profile=target.model,
        model=model.model,
        quantization=model.quantization,
        suite="standard",
        profile=target.profile,
        fingerprint="",
        harness_version=config.project.harness_version or HARNESS_VERSION,
        engine_build=None,
        launch_command=None,
        engine_flags=None,
        status="error",
        failure_reason=None,
        log_tail=None,
        started_at=datetime.now(UTC),
        ended_at=None,
        dagster_run_id=dagster_run_id,
        kernel=None,  # the benchmarked host's, read there (see record_host_facts)
        image_version=image.version if image else None,
        image_sort_key=image.sort_key if image else None,
        model_family=model.family,
        workload=workload_digest(profile, trace_digest(config, profile)),
        baseline_source=target.production.source if target.production else None,
    )


def failure_classes(measured: list[RequestRecord]) -> str:
    """``timeout 2, http_500 1``: what the failed requests died of, most frequent first."""
    counts = Counter(q.error_class or "unknown" for q in measured if not q.ok)
    return ", ".join(f"{c} {n}" for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def status_from_suite(
    smoke_ok: bool | None, measured: list[RequestRecord], engine_gone: str | None = None
) -> tuple[str, str | None]:
    """The run's status from its measured (non-warm-up) requests; the reason names the error classes.
    An engine that died mid-suite fails the run whatever it served before: the suite is incomplete
    and the engine is not one to rest a decision on; the records measured before stay."""
    ok = sum(1 for q in measured if q.ok)
    failed = len(measured) - ok
    why = f" ({failure_classes(measured)})" if failed else ""
    if engine_gone:
        return "failed_serve", f"{engine_gone}; {ok} request(s) ok, {failed} failed{why}"
    if ok == 0:
        return "failed_serve", f"no request succeeded{why}"
    if smoke_ok is False:
        return "failed_serve", "the smoke request did not return valid output"
    if failed:
        return "partial", f"{failed} of {len(measured)} request(s) failed{why}"
    return "ok", None


def cancelled(result: RunResult, e: BaseException) -> BaseException:
    """Record an interrupted run as ``cancelled``, where it stopped, with what the suite had measured;
    returns the original interrupt."""
    run = result.run
    interrupt = e
    if isinstance(e, SuiteInterrupted):
        # what the suite measured is kept (the level in flight with the requests that had finished);
        # its position says where the cancel landed
        interrupt, partial = e.interrupt, e.partial
        take_suite(result, partial)
        where = f"at {partial.position() or 'the start of the suite'}"
        run.failure_reason = join_reasons(run.failure_reason, *partial.errors)
    elif len(result.requests):
        where = "after the suite"
    else:
        where = "before the suite started"
    run.status = "cancelled"
    measured = sum(1 for q in result.requests if not q.warmup)
    run.failure_reason = join_reasons(
        f"cancelled ({type(interrupt).__name__}) {where}; {measured} measured request(s) kept",
        run.failure_reason,
    )
    return interrupt


def record_host_facts(run: RunRecord, probe: MemoryProbe | None) -> HostMemoryFacts | None:
    """Kernel release, command line, TTM limit and amdgpu VBIOS of the host that ran the engine, read
    through its probe (the local tree on `local`, the probe container on a Docker host); without a
    probe they stay None ("not available"), never the controller's values. Returns the facts (None:
    not read)."""
    if probe is None:
        return None
    try:
        facts = probe.host_facts()
    except Exception:  # noqa: BLE001 - facts are evidence, not a reason to fail the run
        return None
    run.kernel, run.kernel_cmdline, run.ttm_pages_limit = (
        facts.kernel_release,
        facts.kernel_cmdline,
        facts.ttm_pages_limit,
    )
    run.hip_device_total_bytes, run.amdttm_pages_limit = (
        facts.hip_device_total_bytes,
        facts.amdttm_pages_limit,
    )
    if facts.vbios:  # part of the fingerprint: another VBIOS is another series
        run.firmware = f"vbios {facts.vbios}"
    return facts


def describe_host_memory(facts: HostMemoryFacts | None) -> str | None:
    """The limits that size the engines' memory on this host, in one line for the run's log."""
    if facts is None:
        return None
    parts = []
    if facts.hip_device_total_bytes:
        parts.append(f"device total as HIP sees it {gib_text(facts.hip_device_total_bytes)} (KFD topology)")
    for name, pages in (("ttm", facts.ttm_module_pages_limit), ("amdttm", facts.amdttm_pages_limit)):
        if pages is not None:
            parts.append(f"{name}.pages_limit {pages} ({gib_text(pages * PAGE_SIZE)})")
    return ", ".join(parts) or None


def record_image_facts(run: RunRecord, eng: docker_engine.DockerEngine) -> None:
    """The ROCm version of the engine image and the GPU firmware it reports, read in the running engine
    container on the host that runs it; what it cannot tell stays as it was (None: not available)."""
    try:
        run.rocm_version = eng.rocm_version()
    except Exception:  # noqa: BLE001 - facts are evidence, not a reason to fail the run
        run.rocm_version = None
    try:
        run.firmware = append_firmware(run.firmware, eng.firmware())
    except Exception:  # noqa: BLE001 - no tool in the image: the probe's VBIOS alone
        pass


def record_engine_env(run: RunRecord, env: dict[str, str]) -> None:
    """The environment the configuration gives the engine's container (the engine's and its image
    source's; part of the fingerprint), recorded before anything can refuse the run, so a run that
    fails stays in its series. Criterion C1 looks for an override in it."""
    run.engine_env = env_json(env)


def record_image_env(run: RunRecord, image_attrs: dict) -> None:
    """The image's own ENV from its config (the pulled image's inspect data: read without running
    it), as Docker lists it. Not in the fingerprint (it moves with every release); C1 reads it."""
    image_env = (image_attrs.get("Config") or {}).get("Env")
    run.image_env = json.dumps([str(e) for e in image_env]) if image_env else None


def record_outage(run: RunRecord, guard: ProductionGuard, engine_s: float, log: Log) -> None:
    """When production went down and came back, and how much of that was the pipeline's own."""
    run.production_down_at, run.production_up_at = guard.stopped_at, guard.restored_at
    if guard.stopped_at and guard.restored_at:
        offline_s = (guard.restored_at - guard.stopped_at).total_seconds()
        run.production_overhead_s = round(max(0.0, offline_s - engine_s), 1)
        log(
            f"[{run.run_id}] production offline {offline_s:.1f} s, of which the pipeline's own "
            f"{run.production_overhead_s:.1f} s (the engine's load and traffic {engine_s:.1f} s)"
        )


def join_reasons(*parts: str | None) -> str | None:
    return "; ".join(p for p in parts if p) or None


def finish_memory(
    result: RunResult, sampler: MemorySampler, tolerance_gb: float, load_level: int | None = None
) -> None:
    """The memory figures from the samples, and the power and energy figures from the GPU's samples
    among them (``load_level``: the decision's concurrency, whose energy is stored beside decode's)."""
    result.memory = sampler.samples
    record_energy(result, load_level)
    # GB as the guards count them, so "returned to baseline" means the same thing in both places
    s = summarize(result.memory, tolerance_bytes=int(tolerance_gb * GB))
    r = result.run
    r.baseline_bytes, r.loaded_idle_bytes, r.held_bytes = s.baseline_bytes, s.loaded_idle_bytes, s.held_bytes
    r.peak_bytes, r.after_stop_bytes, r.memory_returned = s.peak_bytes, s.after_stop_bytes, s.memory_returned
    disagree = counter_disagreements(result.memory)
    if disagree:  # one counter alone is not trusted on unified memory: the run says they differ
        r.failure_reason = join_reasons(r.failure_reason, "memory counters disagree " + "; ".join(disagree))
    # the independent counter: a held figure the host's own memory contradicts is no figure (C5 unknown)
    blind = meminfo_disagreement(result.memory, tolerance_bytes=int(tolerance_gb * GB))
    if blind:
        r.held_bytes = None
        r.failure_reason = join_reasons(r.failure_reason, f"{MEMORY_UNRELIABLE}: {blind}")
    smi_notes = getattr(sampler.smi, "notes", None) or []
    if smi_notes:  # a cross-check that read nothing is said, not hidden in a debug log
        r.failure_reason = join_reasons(r.failure_reason, "SMI output not read: " + "; ".join(smi_notes))


def any_ok(suite: SuiteResult) -> bool:
    return any(q.ok and not q.warmup for q in suite.requests)


def take_suite(result: RunResult, suite: SuiteResult) -> None:
    result.requests, result.aggregates, result.server_metrics, result.quality = (
        suite.requests,
        suite.aggregates,
        suite.server_metrics,
        suite.quality,
    )


def apply_suite(result: RunResult, suite: SuiteResult, log: Log) -> None:
    take_suite(result, suite)
    measured = [q for q in suite.requests if not q.warmup]
    ok = sum(1 for q in measured if q.ok)
    failed = len(measured) - ok
    status, reason = status_from_suite(suite.smoke_ok, measured, suite.engine_gone)
    result.run.status = status
    result.run.failure_reason = join_reasons(reason, *suite.errors)
    log(f"[{result.run.run_id}] suite done: {ok} ok, {failed} failed -> {status}")


def record_breakdown(
    run: RunRecord,
    kind: str,
    log_path: Path | None,
    production_pool_bytes: int | None,
    ctx_tokens: int | None = None,
) -> None:
    """The engine's own figures of what it allocated at load (memory/breakdown.py), read from its log
    file: weights and KV cache (the rest is held minus both), the tokens its KV cache holds --
    ``ctx_tokens`` (llama-server's ``-c``, shared by its slots) when the log does not say -- and the
    production configuration's pool beside them (C5). What neither gives stays None."""
    try:
        text = log_path.read_text(errors="replace") if log_path is not None else ""
    except OSError:
        text = ""  # no log kept: nothing it said
    logged = parse_engine_log(kind, text)
    run.weights_bytes, run.kv_cache_bytes = logged.weights_bytes, logged.kv_bytes
    run.kv_capacity_tokens = (
        logged.kv_capacity_tokens if logged.kv_capacity_tokens is not None else ctx_tokens
    )
    run.production_pool_bytes = production_pool_bytes


def record_energy(result: RunResult, load_level: int | None) -> None:
    """Idle power, energy per request and tokens per joule at the single-client decode level and at the
    decision's load, and the throttling mark (hosts/probes/energy.py); what is missing says why."""
    run, samples = result.run, result.memory
    mark = energy.throttle(samples)
    run.throttled, run.throttle_reason = mark.throttled, mark.reason
    series = energy.power_series(samples)
    if series is None:
        run.energy_problem = energy.NO_POWER_COUNTER
        return
    run.power_source = series.source
    run.idle_power_w = energy.idle_power_w(samples, series)
    decode, _ = single_client_decode(result)
    load = next((a for a in result.aggregates if a.scenario == SWEEP and a.level == load_level), None)
    run.load_level = load_level if load is not None else None
    problems = []
    for name, agg in (("decode", decode), ("load", load)):
        if agg is None:
            problems.append(f"{name}: level not measured")
            continue
        window = energy.level_window(result.requests, agg.scenario, agg.level)
        got = energy.window_energy(series, *window) if window else None
        if got is None or got.joules is None or got.joules <= 0:
            problems.append(f"{name}: {got.problem if got and got.problem else 'no measured request'}")
            continue
        tokens = agg.output_tokens_total or 0
        setattr(run, f"{name}_power_w", got.mean_w)
        setattr(run, f"{name}_j_per_request", got.joules / agg.requests_ok if agg.requests_ok else None)
        setattr(run, f"{name}_tokens_per_j", tokens / got.joules if tokens else None)
    run.energy_problem = "; ".join(problems) or None
