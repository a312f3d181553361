"""A night of runs on one host: production stopped once for all of them, started once after the last.

``with HostNight(host, host_cfg) as night`` holds the host's production for the runs inside it. The
first run that reaches its stop (runner/docker_run.py, after its checks while production still serves)
stops production through :meth:`HostNight.hold`; every later run of the night finds it down and
runs at once; production starts again once, when the night ends (success, failure or cancellation
alike) -- :class:`~strix_pipeline.hosts.box.production.ProductionGuard`'s own stop and restore, called
once each. A night inside a night (the Dagster asset inside `strix run`'s loop over partitions)
joins the outer one: only the outermost starts production again.

A night spans Dagster runs too: the weekly schedule launches a run per image version, each its own
process, all tagged with the night (``night_id``). A run that ends while ``more_to_come`` says later
runs of its night are still to start leaves production down and hands it over (the guard's marker:
``held_for_night``, the runs done so far; the restore armed on the Box stays armed for the window's
end); the next run of that night joins it instead of stopping production again, and the last one
starts it (``restore_held`` when that run never got as far as a guard: all of it deferred). A run of
another night, or one after the planned outage, finds a marker to restore first, as before.

Before each run the window is checked again as a value (:meth:`HostNight.admit`: the window open,
and the run's estimate ending by production's restore (planning/deadline.py), as the plan checks
it); a run that does not fit is deferred to the next night by name (:meth:`HostNight.defer`: a
``deferred`` run record whose reason names it and the window), and the next night takes it first
after the decision's runs and the canary (:func:`night_order`, planning.priority.rank). The rules
are planning's; this only applies them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from strix_pipeline.config import DockerHostConfig, HostConfig, StrixConfig
from strix_pipeline.fingerprint import run_fingerprint
from strix_pipeline.hosts.box.marker import held_for_night, pass_on_held, read_marker
from strix_pipeline.planning.estimate import Estimate
from strix_pipeline.planning.measured import Measured
from strix_pipeline.planning.night_fit import PlannedRun, admit_run, ordered
from strix_pipeline.planning.priority import run_priority
from strix_pipeline.planning.targets import BenchmarkTarget, canary_images
from strix_pipeline.planning.week import run_name
from strix_pipeline.planning.window import Fit
from strix_pipeline.records import RunResult
from strix_pipeline.runner.record import join_reasons, new_record
from strix_pipeline.runner.target import Log
from strix_pipeline.usable import DEADLINE, DEFERRED

if TYPE_CHECKING:
    from strix_pipeline.hosts.box.production import ProductionGuard

# the nights being held in this process, by host: run_docker asks here whether production is held
_HELD: dict[str, HostNight] = {}


def held(host: str) -> HostNight | None:
    """The night holding ``host``'s production in this process, if any."""
    return _HELD.get(host)


@dataclass(frozen=True)
class Deferral:
    name: str  # the run's name, as the plan and the next night call it (planning.week.run_name)
    reason: str


class HostNight:
    """Production held down on one host for a night of runs (see the module's docstring)."""

    def __init__(
        self,
        host: str,
        host_cfg: HostConfig,
        *,
        log: Log = print,
        night_id: str | None = None,
        member: str | None = None,
        state_dir: Path | None = None,
        more_to_come: Callable[[set[str]], int] | None = None,
        restore_held: Callable[[dict], ProductionGuard] | None = None,
    ) -> None:
        self.host, self.host_cfg, self.log = host, host_cfg, log
        # the night across Dagster runs: its name, this run's (member) among them, where the guard's
        # marker lives, how many of the night's runs on this host are still to start (given the runs
        # already done), and how to start production held by an earlier run when no guard was made
        self.night_id, self.member, self.state_dir = night_id, member, state_dir
        self.more_to_come, self.restore_held = more_to_come, restore_held
        self.handed: dict | None = None  # production as an earlier run of the night left it
        self.handed_over = 0  # later runs production was left down for, at this night's end
        self.guard: ProductionGuard | None = None
        self.stops = 0  # production's stops this night: one at most
        self.starts = 0  # production's starts again this night: one at most
        self.runs: list[RunResult] = []  # the runs made while production was held
        self.deferred: list[Deferral] = []
        self._outer: HostNight | None = None

    # -- the one stop, the one start

    @property
    def _root(self) -> HostNight:
        """The night that holds production: the outermost one (a night inside a night joins it)."""
        return self._outer or self

    @property
    def production_down(self) -> bool:
        root = self._root
        return (root.guard is not None and root.guard.stopped) or root.handed is not None

    def checks_host(self) -> DockerHostConfig:
        """The host as a run's pre-stop checks see it: while the night holds production down there is
        no production to check (its health, its port and its GPU memory are the benchmark's now)."""
        cfg = self.host_cfg
        if not isinstance(cfg, DockerHostConfig):
            raise TypeError(f"host {self.host!r} is of kind {cfg.kind!r}: no checks before a stop")
        return cfg.model_copy(update={"production": None}) if self.production_down else cfg

    def hold(self, guard: ProductionGuard) -> ProductionGuard:
        """Called by a run at its stop: the first stops production (the guard's own enter: its marker
        checked, a half-done stop undone); later runs get the night's guard, production already down."""
        night = self._root
        if night.guard is not None and night.guard.stopped:
            return night.guard
        if night.handed is not None:  # down since an earlier run of the night: taken over, not stopped
            guard.adopt(night.handed)
            night.guard = guard
            return guard
        guard.__enter__()
        night.guard = guard
        if guard.stopped:
            night.stops += 1
            night.log(f"production on {night.host} stopped once for the night")
        return guard

    def ran(self, result: RunResult) -> None:
        self._root.runs.append(result)

    def __enter__(self) -> HostNight:
        outer = _HELD.get(self.host)
        if outer is not None:
            self._outer = outer
            return self
        _HELD[self.host] = self
        if self.night_id and self.state_dir is not None:
            info = read_marker(self.state_dir, self.host)
            if held_for_night(info, self.night_id, datetime.now(UTC)):
                self.handed = info
                self.log(
                    f"production on {self.host} is down for night {self.night_id} since "
                    f"{info.get('stopped_at')} (run {info.get('run_id')} stopped it): this run joins it"
                )
        return self

    def _done(self) -> list[str]:
        done = list((self.handed or {}).get("done") or [])
        return done + [self.member] if self.member and self.member not in done else done

    def __exit__(self, *exc: object) -> None:
        if self._outer is not None:  # the outer night starts production, once
            return
        _HELD.pop(self.host, None)
        guard = self.guard
        if guard is None and self.handed is not None:
            remaining = self._remaining(exc)
            if remaining:  # nothing of this run reached production: the hand-over goes on as it was
                self._hand_over_marker(remaining)
                return
            if self.restore_held is not None:
                guard = self.restore_held(self.handed)
                self._said_started(guard, "")
            return
        if guard is None or not guard.stopped:
            return
        remaining = self._remaining(exc)
        if remaining:
            guard.hand_over(self.night_id or "", self._done(), remaining)
            self.handed_over = remaining
            self.log(
                f"production on {self.host} stays down for {remaining} more run(s) of night "
                f"{self.night_id} after {len(self.runs)} run(s) here; the last one starts it, the restore "
                f"armed on the Box by {guard.restore_by:%H:%M} UTC if none does"
                if guard.restore_by
                else f"production on {self.host} stays down for {remaining} more run(s) of night "
                f"{self.night_id}"
            )
            for result in self.runs:  # down since the night's stop, up when its last run ends
                result.run.production_down_at = guard.stopped_at
            return
        guard.__exit__(*exc)
        self._said_started(guard, f" after {len(self.runs)} run(s)")
        for result in self.runs:  # every run of the night shares its one outage
            run = result.run
            run.production_down_at, run.production_up_at = guard.stopped_at, guard.restored_at
            result.production_restored = guard.restored is not False
            if guard.restored is False:
                run.failure_reason = join_reasons(
                    run.failure_reason, f"production on host {self.host} NOT restored: {guard.restore_error}"
                )

    def _said_started(self, guard: ProductionGuard, after: str) -> None:
        self.starts += 1
        self.log(
            f"production on {self.host} started again once{after}: "
            + ("healthy" if guard.restored else f"NOT restored: {guard.restore_error}")
        )

    def _remaining(self, exc: tuple[object, ...]) -> int:
        """Later runs of this night still to start on this host; 0 (start production now) outside a
        night, on an exception (a cancelled or broken run starts what it stopped), after a run stopped
        at its deadline, or when unknown."""
        if not self.night_id or self.more_to_come is None or (exc and exc[0] is not None):
            return 0
        if any(r.run.status == DEADLINE for r in self._root.runs):
            # the restore's time has come: every later run would be deferred, production starts now
            return 0
        try:
            return max(0, int(self.more_to_come(set(self._done()))))
        except Exception as e:  # noqa: BLE001 - not knowing what is to come, production is started
            self.log(f"the night's later runs on {self.host} not read ({e}): production is started now")
            return 0

    def _hand_over_marker(self, remaining: int) -> None:
        """The marker of a night this run joined but never touched, with this run among the done."""
        assert self.state_dir is not None and self.handed is not None
        pass_on_held(self.state_dir, self.host, self.handed, done=self._done(), remaining=remaining)
        self.handed_over = remaining
        self.log(f"production on {self.host} stays down for {remaining} more run(s) of night {self.night_id}")

    # -- the window, before each run

    def admit(
        self, config: StrixConfig, est: Estimate, *, now: datetime | None = None, force: bool = False
    ) -> Fit:
        """The window checked again before a run: the one rule (planning.night.admit_run) the runner
        applies too. ``force``: a manual run, not checked; a host that keeps no window is not either."""
        now = now or datetime.now(UTC)
        return admit_run(
            self.host_cfg, config.project.schedule, est, now, config.project.timezone, force=force
        )

    def defer(
        self,
        config: StrixConfig,
        target: BenchmarkTarget,
        run_id: str,
        reason: str,
        dagster_run_id: str | None = None,
    ) -> RunResult:
        """A run the window did not hold: deferred to the next night by name, stored as ``deferred``."""
        name = run_name(target)
        run = new_record(config, target, run_id, dagster_run_id)
        run.status = DEFERRED
        run.failure_reason = (
            f"deferred to the next night: {name}: {reason}; production was not stopped for it"
        )
        run.ended_at = run.started_at
        run.fingerprint = run_fingerprint(run)
        self._root.deferred.append(Deferral(name, reason))
        self.log(f"[{run_id}] {run.failure_reason}")
        return RunResult(run=run)


def night_order(
    config: StrixConfig,
    targets: list[BenchmarkTarget],
    images: list,
    *,
    deferred_since: Mapping[Measured, datetime] | None = None,
    waited: Mapping[Measured, int] | None = None,
) -> list[BenchmarkTarget]:
    """The night's targets in the plan's order (planning.night.ordered): starved runs, the decision's
    and the canary, what an earlier night deferred, then the rest. ``deferred_since`` and ``waited``
    are the warehouse's (warehouse.past_runs.deferred_runs); ``images`` the known images (to tell the
    newest)."""
    canary = {i.digest for i in canary_images(config, images)}
    by_run: dict[int, BenchmarkTarget] = {}
    planned: list[PlannedRun] = []
    for t in targets:
        key = Measured(t.host, t.engine, t.image.digest if t.image else "", t.model)
        prio = run_priority(config, t.image, images or [t.image]) if t.image else 0
        run = PlannedRun(
            run_name(t),
            t.host,
            Estimate(0.0, "not needed for the order"),
            prio,
            bool(t.image and t.image.digest in canary),
            (waited or {}).get(key, 0),
            (deferred_since or {}).get(key),
        )
        by_run[id(run)] = t
        planned.append(run)
    return [by_run[id(r)] for r in ordered(planned, config.project.starve_weeks)]
