"""A night of one host's runs, start to end, in plain Python: what the benchmark asset calls.

The targets in the plan's order (:func:`~strix_pipeline.runner.night_hold.night_order`), production stopped
once for all of them (:class:`~strix_pipeline.runner.night_hold.HostNight`), the window checked again
before each with its estimate (the one rule, planning.night.admit_run), what does not fit deferred to
the next night by name; each run spooled at once (a controller that dies later in the night loses
nothing measured), then stored after the night, each carrying the night's one stop and start of
production. The caller turns the :class:`NightOutcome` into its checks and metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.estimate import Estimate, estimate
from strix_pipeline.planning.measured import DeferredRun, deferral_ages
from strix_pipeline.planning.targets import BenchmarkTarget
from strix_pipeline.planning.week import Series, run_name
from strix_pipeline.records import ImageRecord, RunResult
from strix_pipeline.runner.docker_run import restore_held
from strix_pipeline.runner.night_hold import HostNight, night_order
from strix_pipeline.runner.night_pull import pull_before_stop
from strix_pipeline.runner.run import run_benchmark
from strix_pipeline.runner.target import RunCancelled
from strix_pipeline.warehouse import spool
from strix_pipeline.warehouse.errors import WarehouseError


class NightLog(Protocol):
    """Where the night says what it does (a Dagster context's log, or a logger)."""

    def info(self, msg: str) -> None: ...
    def warning(self, msg: str) -> None: ...
    def error(self, msg: str) -> None: ...


@dataclass(frozen=True)
class NightRequest:
    """What a night is given besides its targets and estimates."""

    host: str
    dagster_run_id: str  # the run ids derive from it: re-executing it replaces its rows
    open_writer: Callable  # the warehouse the runs are stored in (its file or its DuckLake)
    known: list[ImageRecord] = field(default_factory=list)  # the known images: the newest, the canary
    deferred: list[DeferredRun] = field(default_factory=list)  # the warehouse's account of deferrals
    night_id: str | None = None  # the weekly night this run belongs to (its runs share one outage)
    more_to_come: Callable[[set[str]], int] | None = None  # the night's runs still to start here
    force: bool = False  # a manual run: the window is not checked
    keep_images: frozenset[str] | None = None  # digests some series still needs (a Box short of disk)


@dataclass
class NightOutcome:
    """What a night did: its runs as stored, what it deferred by name, production's one stop."""

    results: list[RunResult]
    deferred: dict[str, str]  # run name -> why
    stops: int  # production's stops this night: one at most
    handed_over: int  # later runs of the weekly night production was left down for (0: started here)
    cancelled: RunCancelled | None = None  # the night was cancelled: its interrupt goes on after


def series(target: BenchmarkTarget) -> Series:
    """The series a target's estimate is read for: (host, engine, model profile, scenario profile)."""
    return (target.host, target.engine, target.model, target.profile)


def run_night(
    config: StrixConfig,
    targets: list[BenchmarkTarget],
    estimates: Mapping[Series, Estimate],
    request: NightRequest,
    log: NightLog,
    run: Callable[..., RunResult] = run_benchmark,
    pull: Callable[..., dict[str, str]] = pull_before_stop,
) -> NightOutcome:
    """Run ``targets`` on ``request.host`` as one night; ``estimates`` by series (:func:`series`; the
    default estimate for one it lacks). ``run`` runs one target (:func:`run_benchmark`); ``pull``
    pulls every image of the night first, while production still serves (runner/night_pull.py), and
    names the targets whose pull failed: those are deferred, production never stopped for them.
    Raises :class:`~strix_pipeline.warehouse.spool.RunNotStored` when the warehouse refuses a run
    (kept in its spool file) unless the night was cancelled."""
    host = request.host
    deferred_since, waited = deferral_ages(request.deferred, datetime.now(UTC))
    order = night_order(config, targets, request.known, deferred_since=deferred_since, waited=waited)
    spooled_to = spool.spool_dir(config.artifacts_dir())
    facts = spool.HostFacts(host, config.hosts[host].kind, config.hosts[host].description)
    made: list[RunResult] = []
    cancelled: RunCancelled | None = None
    # before the night's one stop: a later run's pull never happens with production down
    unpulled = pull(config, host, order, log.info, keep_images=request.keep_images)
    with HostNight(
        host,
        config.hosts[host],
        log=log.info,
        night_id=request.night_id,
        member=request.dagster_run_id,
        state_dir=config.state_dir(),
        more_to_come=request.more_to_come,
        restore_held=restore_held(config, host, request.dagster_run_id, log.info),
    ) as night:
        for target in order:
            run_id = f"{target.host}-{target.engine}-{target.model}-{request.dagster_run_id[:8]}"
            est = estimates.get(series(target)) or estimate([])
            if (why := unpulled.get(run_name(target))) is not None:
                made.append(night.defer(config, target, run_id, why, request.dagster_run_id))
                continue
            admitted = night.admit(config, est, force=request.force)
            if not admitted.fits:
                made.append(night.defer(config, target, run_id, admitted.reason, request.dagster_run_id))
                continue
            try:
                result = run(
                    config,
                    target,
                    run_id=run_id,
                    dagster_run_id=request.dagster_run_id,
                    log=log.info,
                    force=request.force,
                    keep_images=request.keep_images,
                    estimate=est,
                )
            except RunCancelled as e:
                # Terminated (the UI's Terminate, Ctrl-C): the engine is stopped by now and the
                # night starts production as it ends; the run is stored as `cancelled` with what
                # it measured, then the interrupt goes on so the orchestrator marks the run cancelled.
                cancelled, result = e, e.result
            made.append(result)
            # spooled at once: a controller that dies later in the night loses nothing measured
            # (the next load drains it); stored below, again, with the night's one outage
            try:
                spool.write_spool(result, spooled_to, facts)
            except (OSError, WarehouseError) as e:
                log.warning(f"run {run_id} not spooled before the night ends: {e}")
            if cancelled is not None:
                break
    stored = _store(made, spooled_to, facts, request.open_writer, log, cancelled)
    deferred = {d.name: d.reason for d in night.deferred}
    return NightOutcome(stored, deferred, night.stops, night.handed_over, cancelled)


def _store(
    made: list[RunResult],
    spooled_to: Path,
    facts: spool.HostFacts,
    open_writer: Callable,
    log: NightLog,
    cancelled: RunCancelled | None,
) -> list[RunResult]:
    """Stored after the night: each run carries the night's one stop and start of production."""
    results: list[RunResult] = []
    for result in made:
        try:  # spooled to a file first: a warehouse that refuses the load loses nothing
            stored = spool.store_run(result, spool_directory=spooled_to, open_writer=open_writer, host=facts)
        except spool.RunNotStored as e:
            if cancelled is not None:  # kept in the spool file; the cancellation still goes on
                log.error(f"run {result.run.run_id} not loaded: {e}")
                continue
            raise
        for note in stored.notes():
            log.warning(note)
        log.info(
            f"loaded run {result.run.run_id}: {result.run.status}, {len(result.requests)} requests, "
            f"{len(result.aggregates)} aggregates, {len(result.memory)} memory samples"
        )
        results.append(result)
    return results
