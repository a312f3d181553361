"""A run on a Docker host (the Box over ``ssh://``): guards while production serves, production stopped
and restored around the engine's container."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.engines import comparable_flags, image_source
from strix_pipeline.hosts import guards
from strix_pipeline.hosts.box import checks as box_checks
from strix_pipeline.hosts.box import selinux
from strix_pipeline.hosts.box.production import ProductionGuard, check_maintenance_window
from strix_pipeline.hosts.box.production_alerts import ProductionAlerts
from strix_pipeline.hosts.cleanup import probe_images
from strix_pipeline.hosts.docker import engine as docker_engine
from strix_pipeline.hosts.docker import host as docker_host
from strix_pipeline.hosts.docker import launcher as dk
from strix_pipeline.hosts.docker.ssh import client_transport
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.probes import efficiency as efficiency_probe
from strix_pipeline.memory import (
    MemorySampler,
    TreeProbe,
    current_in_use,
)
from strix_pipeline.planning.deadline import restore_time
from strix_pipeline.planning.estimate import Estimate, estimate, estimate_error
from strix_pipeline.planning.night_fit import admit_run
from strix_pipeline.registry.names import pull_reference
from strix_pipeline.runner import night_hold as nights
from strix_pipeline.runner.as_deployed import production_for
from strix_pipeline.runner.deadline_watch import DeadlineWatch
from strix_pipeline.runner.efficiency import (
    DOCKER_HOST_EFFICIENCY,
    bandwidth_line,
    model_line,
    record_efficiency,
)
from strix_pipeline.runner.inputs import RunInputs
from strix_pipeline.runner.measure import measure
from strix_pipeline.runner.record import (
    describe_host_memory,
    finish_memory,
    join_reasons,
    record_breakdown,
    record_engine_env,
    record_host_facts,
    record_image_facts,
    record_outage,
)
from strix_pipeline.runner.run_image import check_disk, pull_and_check_image
from strix_pipeline.runner.target import BenchmarkTarget, Log
from strix_pipeline.usable import DEADLINE, DEFERRED
from strix_pipeline.webhook import webhook_url


def production_guard(
    config: StrixConfig, host: str, client: Any, run_id: str, restore_by: datetime | None, log: Log
) -> ProductionGuard:
    """The guard of ``host``'s production for one run: its marker under the artifacts' state, its
    commands over the client's own ssh link, its alerts to the webhook and ``log``."""
    return ProductionGuard(
        host,
        config.docker_config(host).production,
        state_dir=config.state_dir(),
        client=client,
        ssh=t.target if (t := client_transport(client)) else None,  # make_client's
        run_id=run_id,
        restore_by=restore_by,
        alert=ProductionAlerts(webhook_url(config), log),
    )


def restore_held(config: StrixConfig, host: str, run_id: str, log: Log) -> Callable[[dict], ProductionGuard]:
    """How a night's last run starts production an earlier run of the night left down, when it never
    made a guard of its own (every run of it deferred): the guard adopts the marker and restores."""

    def restore(info: dict) -> ProductionGuard:
        client = docker_host.make_client(config.docker_config(host))
        try:
            guard = production_guard(config, host, client, run_id, None, log)
            guard.adopt(info)
            guard.restore()
            return guard
        finally:
            client.close()

    return restore


def admit(
    config: StrixConfig,
    target: BenchmarkTarget,
    est: Estimate,
    *,
    force: bool = False,
    now: datetime | None = None,
) -> datetime | None:
    """The run's window, checked before anything is pulled or stopped: refused (``failed_guard``)
    outside it, deferred (``deferred``) when ``est`` and production's restore do not fit what is left
    of it -- the night's own rule (planning.night.admit_run). Returns the window's start (None: forced)."""
    host_cfg = config.docker_config(target.host)
    now = now or datetime.now(UTC)
    schedule, timezone = config.project.schedule, config.project.timezone
    window = check_maintenance_window(host_cfg, schedule, now=now, timezone=timezone, force=force)
    if window is not None:
        fit = admit_run(host_cfg, schedule, est, now, timezone)
        if not fit.fits:
            raise EngineStartError(DEFERRED, f"{fit.reason}; production was not stopped")
    return window


@dataclass
class _Box:
    """What a run on the Box holds from its start to its end: the client, the memory probe and sampler,
    production's guard (this run's, and the one holding production down: the night's or this one)."""

    client: Any
    probe: Any
    smi: docker_engine.SmiReader
    facts: Any
    sampler: MemorySampler | None
    read: Callable[[], int] | None
    night: nights.HostNight | None
    production: ProductionGuard | None = None
    guard: ProductionGuard | None = None
    engine_s: float = 0.0  # the engine's own part of production's outage: load and traffic
    # the restore's time (planning/deadline.py): the engine is removed then, whatever it is doing
    deadline: datetime | None = None


@dataclass
class _Ready:
    """What the checks made while production still serves leave for the run after the stop."""

    launcher: dk.DockerLauncher
    checks_host: DockerHostConfig
    leftovers: Any
    efficiency_why: str | None


def run_docker(r: RunInputs) -> None:
    """One run on a Docker host, in its stages: admitted to the window, checks and pull while production
    serves, production stopped (once a night), the engine measured, memory checked, all closed."""
    config, target, run = r.config, r.target, r.result.run
    if target.image is None:
        raise EngineStartError("failed_guard", f"host {target.host} runs containers: the target has no image")
    image_ref = pull_reference(target.image.registry, target.image.repository, target.image.digest)
    # what the run is expected to take (the caller's, from its series' history): one that would
    # overrun the window is deferred to the next one before anything is pulled or stopped
    est = r.estimate or estimate([])
    window = admit(config, target, est, force=r.force)
    run_started = time.monotonic()
    box = _open_box(r, image_ref)
    try:
        # a run of production's own image and model file runs as production deploys it
        said = lambda line: r.log(f"[{run.run_id}] {line}")  # noqa: E731
        if (deployed := production_for(config, target, box.client, said)) is not None:
            r = replace(r, target=replace(target, production=deployed))
            run.baseline_source = deployed.source
        with ExitStack() as stack:
            ready = _before_stop(r, box, image_ref, window)
            # alone: stopped here and started when the run ends; in a night: stopped by its first run
            # only, started when the night ends
            assert box.production is not None
            box.guard = (
                box.night.hold(box.production)
                if box.night is not None
                else stack.enter_context(box.production)
            )
            _after_stop(r, box, ready, stack)
    finally:
        r.log(f"[{run.run_id}] {estimate_error(est, time.monotonic() - run_started)}")
        _close(r, box)


def _open_box(r: RunInputs, image_ref: str) -> _Box:
    """The client to the Box, its memory probe and sampler, and the night holding its production."""
    host_cfg, run = r.config.docker_config(r.target.host), r.result.run
    client = docker_host.make_client(host_cfg)
    probe = docker_host.probe_for_host(host_cfg, client)
    facts = record_host_facts(run, probe)
    if said := describe_host_memory(facts):
        r.log(f"[{run.run_id}] host memory: {said}")
    smi = docker_engine.SmiReader(client, host_cfg, image_ref, probe=probe)
    sampler = (
        MemorySampler(probe, run.run_id, interval_s=host_cfg.sample_interval_s, smi=smi) if probe else None
    )
    read = (lambda: current_in_use(probe)) if probe else None
    # a night holding this host's production (runner/night_hold.py): stopped once by its first run,
    # started once when the night ends; a run alone stops and starts it itself
    return _Box(client, probe, smi, facts, sampler, read, nights.held(r.target.host))


def _before_stop(r: RunInputs, box: _Box, image_ref: str, window: datetime | None) -> _Ready:
    """Everything that can refuse or take long, while production still serves its users: the budget,
    the leftovers, the pull (minutes for a ROCm image), the image's executable and the GPU targets it
    was compiled for, the disk, the Box's own word."""
    config, target, run, log = r.config, r.target, r.result.run, r.log
    assert target.image is not None
    host_cfg, engine = config.docker_config(target.host), config.engines[target.engine]
    client = box.client
    source = image_source(engine, target.image.registry, target.image.repository)
    launcher = dk.DockerLauncher(
        host_cfg,
        engine,
        config.models[target.model],
        image_ref,
        run.run_id,
        r.log_dir,
        client,
        source=source,
        release=target.image.version,  # whether vLLM takes --kv-cache-memory-bytes (engines/vllm.py)
        # production as deployed: its command, environment and model file instead of the profile's
        model_path=target.production.model_on_host if target.production else None,
        production=target.production,
    )
    launcher.size_pools(box_checks.device_memory(host_cfg, engine, box.facts))
    enforcing, selinux_note = selinux.enforcing(client, host_cfg.probe_image)
    launcher.selinux_enforcing = enforcing is True
    if launcher.selinux_enforcing:
        log(f"[{run.run_id}] SELinux enforces on the host: the engine runs with {selinux.LABEL_OPT}")
    elif selinux_note:
        log(f"[{run.run_id}] {selinux_note}")
    record_engine_env(run, launcher.spec.env)
    what = f"{launcher.spec.kind} '{launcher.spec.served_model_name}'"
    guards.check_reservations(launcher.spec.reservations, host_cfg.memory_budget_gb, what=what)
    leftovers = guards.clean_leftovers(client)

    # the planned outage ends with the window: the Box's own restore is armed for then
    restore_by = (window or datetime.now(UTC)) + timedelta(hours=host_cfg.maintenance_window_hours)
    box.production = production_guard(config, target.host, client, run.run_id, restore_by, log)
    box.deadline = restore_time(restore_by, host_cfg.production)
    # a production an earlier run left down is said as that, before any check finds it unhealthy
    # (not while this run's night holds it down on purpose)
    if box.night is None or not box.night.production_down:
        box.production.check_marker()
    checks_host = box.night.checks_host() if box.night is not None else host_cfg

    # what would fail only after the stop: production's health, the model, the port, the disk, the GPU
    probe_images.remember(config.state_dir(), target.host, host_cfg)  # what this host's runs pull as probes
    check_disk(r, client, launcher, checks_host, image_ref)
    pull_and_check_image(r, client, launcher, image_ref, source)
    # decode efficiency's probe image, pulled now if missing: a pull after the stop is outage
    efficiency_why = (
        efficiency_probe.prepare_image(client, host_cfg)
        if host_cfg.efficiency_probe_image
        else DOCKER_HOST_EFFICIENCY
    )
    # the Box's own word, still before production stops: HiCache on unified memory, foreign
    # holders of GPU memory, a model whose weights do not fit the pool HIP's device total makes
    for note in box_checks.before_production_stops(
        client, checks_host, launcher.spec, box.smi.run, box.facts, launcher.host_model_path, what=what
    ):
        log(f"[{run.run_id}] {note}")
    return _Ready(launcher, checks_host, leftovers, efficiency_why)


def _after_stop(r: RunInputs, box: _Box, ready: _Ready, stack: ExitStack) -> None:
    """With production stopped: the preflight, decode efficiency, the engine measured, memory checked."""
    config, target, run, log = r.config, r.target, r.result.run, r.log
    host_cfg, launcher = config.docker_config(target.host), ready.launcher
    # with production stopped: its port free, memory at the idle baseline
    pre = guards.preflight(host_cfg, launcher.spec, read_in_use=box.read, run_smi=box.smi.run)
    pre.leftovers = ready.leftovers
    notes = pre.notes()  # leftovers removed, a baseline that never settled
    if notes:
        log(f"[{run.run_id}] {notes}")
        run.failure_reason = notes  # recorded even when the start fails
    efficiency = _measure_efficiency(r, box, launcher, ready.efficiency_why)
    if box.sampler:
        stack.enter_context(box.sampler)
        box.sampler.set_phase("loading")
    _serve_and_measure(r, box, launcher, efficiency)
    if notes:
        run.failure_reason = join_reasons(run.failure_reason, notes)
    if box.read is not None:
        _check_memory_back(r, box, pre.baseline_bytes)


def _measure_efficiency(r: RunInputs, box: _Box, launcher: dk.DockerLauncher, why: str | None) -> tuple:
    """Decode efficiency's probe, with production stopped and before the engine and the sampler:
    nothing else copies memory, and the probe's buffers are neither in the baseline nor the samples.
    Returns (bandwidth, model bytes, why not)."""
    run, log = r.result.run, r.log
    bandwidth = model_bytes = None
    if why is None:
        threads = efficiency_probe.engine_threads(launcher.spec.kind, launcher.spec.flags)
        bandwidth, model_bytes, why = efficiency_probe.measure_on_host(
            box.client, r.config.docker_config(r.target.host), threads, launcher.host_model_path
        )
        if bandwidth:
            log(f"[{run.run_id}] {bandwidth_line(bandwidth)}")
        if model_bytes:
            log(f"[{run.run_id}] {model_line(model_bytes)}")
    if why:
        log(f"[{run.run_id}] decode efficiency: {why}")
    return bandwidth, model_bytes, why


def _serve_and_measure(r: RunInputs, box: _Box, launcher: dk.DockerLauncher, efficiency: tuple) -> None:
    """The engine started, the suite measured against it, the engine stopped; what it said recorded."""
    config, target, result, log = r.config, r.target, r.result, r.log
    run, host_cfg, probe = result.run, config.docker_config(target.host), box.probe
    engine_started = time.monotonic()
    assert box.deadline is not None
    watch = DeadlineWatch(box.deadline, _engine_remover(host_cfg, launcher.container_name()), log)
    try:
        with watch, launcher as eng:
            box.smi.engine = eng
            run.launch_command = eng.command_line()
            run.engine_flags = json.dumps(comparable_flags(launcher.spec.kind, launcher.spec.flags))
            run.engine_build = eng.engine_build
            record_image_facts(run, eng)
            log(f"[{run.run_id}] ready at {eng.base_url} (ROCm {run.rocm_version or 'not available'})")
            if isinstance(probe, TreeProbe) and eng.pid:
                probe.pid = eng.pid  # a daemon on this machine: the engine's RSS, as on `local`
            settle_s = max(2.0, 2 * host_cfg.sample_interval_s)
            measure(config, target, result, eng, log, r.scenarios, box.sampler, settle_s)
            record_efficiency(result, *efficiency)
            run.log_tail = eng.log_tail()
    except Exception as e:
        if watch.passed and getattr(e, "status", None) != DEADLINE:
            raise watch.error() from e  # what the removed engine made the run see is the deadline's doing
        raise
    finally:
        run.compile_cache = launcher.compile_cache  # cold or warm: start times compare within one
        box.smi.engine = None
        box.engine_s = time.monotonic() - engine_started
        if isinstance(probe, TreeProbe):
            probe.pid = None
        if box.sampler:
            box.sampler.set_phase("after_stop")
        if run.log_tail is None:  # the engine's last lines also when the suite crashed
            run.log_tail = docker_engine.container_log_tail(None, launcher.log_path) or None
        # what the engine's log says it allocated at load: C5's weights / KV / other on the Box;
        # vLLM's KV cache sized for the same context when it could be (the launcher's log says
        # why not), production's configured pool beside it
        model = config.models[target.model]
        ctx = model.context_length * model.parallel if launcher.spec.kind == "llamacpp" else None
        record_breakdown(run, launcher.spec.kind, launcher.log_path, launcher.production_pool_bytes, ctx)
        # the environment the engine got: sizing for the context drops VLLM_CPU_KVCACHE_SPACE
        record_engine_env(run, launcher.spec.env)
    if watch.passed:  # the suite stopped at the engine's removal: a failure, with its reason
        raise watch.error()


def _engine_remover(host_cfg: DockerHostConfig, name: str) -> Callable[[], None]:
    """Removes the engine's container by name over a client of its own (the run's is busy measuring)."""

    def remove() -> None:
        import docker.errors

        client = docker_host.make_client(host_cfg, timeout_s=60)
        try:
            client.containers.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass  # not created yet, or gone: the launcher's cleanup removes whatever is left
        finally:
            client.close()

    return remove


def _check_memory_back(r: RunInputs, box: _Box, baseline_bytes: Any) -> None:
    """Memory back at the idle baseline after the engine stopped, or why it was not checked."""
    run, host_cfg = r.result.run, r.config.docker_config(r.target.host)
    assert box.read is not None
    try:
        returned, _ = guards.after_stop(host_cfg, box.read, baseline_bytes)
    except Exception as e:  # noqa: BLE001 - the host unreachable: not checked, and said so
        returned = None
        run.failure_reason = join_reasons(
            run.failure_reason, f"memory after stop not checked: {docker_host.host_error(box.client, e)}"
        )
    if returned is False:
        run.failure_reason = join_reasons(run.failure_reason, "memory did not return to baseline after stop")


def _close(r: RunInputs, box: _Box) -> None:
    """The run's end, whatever happened: the samples, the client, and production's outage and alerts."""
    result, run, log, target = r.result, r.result.run, r.log, r.target
    guard, production = box.guard, box.production
    if box.sampler:
        box.sampler.stop()
        finish_memory(
            result,
            box.sampler,
            r.config.hosts[target.host].baseline_tolerance_gb,
            r.config.decision.concurrency,
        )
    if box.probe is not None:
        box.probe.close()
    box.client.close()
    if box.night is not None and guard is not None:
        box.night.ran(result)  # production's one start, at the night's end, is recorded on it then
    if guard is not None and guard.production is not None:
        result.production_restored = guard.restored is not False
        record_outage(run, guard, box.engine_s, log)
    if production is not None and production.alerts:  # the run's record says what the alerts said
        run.failure_reason = join_reasons(run.failure_reason, *production.alerts)
    if guard is not None and guard.restored is False:
        msg = f"production on host {target.host} NOT restored: {guard.restore_error}"
        log(f"[{run.run_id}] ERROR: {msg}; the next run refuses to start until it is healthy")
        run.failure_reason = join_reasons(run.failure_reason, msg)
