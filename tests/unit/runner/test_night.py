"""A night of runs on one host (runner/night_hold.py): production stopped once for all of them and started
once when the night ends, each run carrying that one outage; the window checked again before each
run as a value; a run that does not fit deferred by name; a night inside a night joins it.

The guard is a stand-in with ProductionGuard's surface (enter stops, exit restores): what is
asserted is how often the night calls them and what it writes on the runs. The real guard on the Box
simulator is tests/integration/docker/test_box_night.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from support.paths import REPO
from support.pipeline_helpers import write_config
from support.warehouse import image as warehouse_image

from strix_pipeline.config_load import load_config
from strix_pipeline.planning.estimate import Estimate
from strix_pipeline.records import ImageRecord, RunResult
from strix_pipeline.runner.night_hold import HostNight, held
from strix_pipeline.runner.record import new_record
from strix_pipeline.runner.target import BenchmarkTarget
from strix_pipeline.usable import DEADLINE, DEFERRED

EXAMPLE = REPO / "config" / "strix-halo.example.toml"
HOST = "strix-halo"
BERLIN = ZoneInfo("Europe/Berlin")
# the example Box's window: nightly at 03:00 Berlin, 6 hours
IN_WINDOW = datetime(2026, 12, 8, 3, 30, tzinfo=BERLIN).astimezone(UTC)
NOON = datetime(2026, 12, 8, 12, 0, tzinfo=BERLIN).astimezone(UTC)


class StandInGuard:
    """ProductionGuard's surface as the night uses it."""

    def __init__(self, restores: bool = True) -> None:
        self.restores = restores
        self.enters = self.exits = 0
        self.stopped = False
        self.restored: bool | None = None
        self.stopped_at: datetime | None = None
        self.restored_at: datetime | None = None
        self.restore_error: str | None = None

    def __enter__(self) -> StandInGuard:
        self.enters += 1
        self.stopped, self.stopped_at = True, datetime.now(UTC)
        return self

    def __exit__(self, *exc: object) -> None:
        self.exits += 1
        self.restored = self.restores
        if self.restores:
            self.restored_at = datetime.now(UTC) + timedelta(seconds=5)
        else:
            self.restore_error = "production did not answer /health within 120 s"


@pytest.fixture
def config():
    return load_config(EXAMPLE)


def image() -> ImageRecord:
    return warehouse_image(
        "server-b11434",
        "sha256:" + "a" * 64,
        datetime.now(UTC),
        engine="llamacpp",
        registry="ghcr.io",
        repository="ggml-org/llama.cpp",
        version="b11434",
        sort_key="11434",
        labels=None,
        created=None,
    )


def target(config, model: str) -> BenchmarkTarget:
    return BenchmarkTarget(HOST, "llamacpp", model, "standard", image())


def a_run(config, model: str, run_id: str) -> RunResult:
    return RunResult(run=new_record(config, target(config, model), run_id, None))


def test_the_first_run_stops_production_later_runs_find_it_down_and_it_starts_once_at_the_end(config):
    lines: list[str] = []
    first, second = StandInGuard(), StandInGuard()
    with HostNight(HOST, config.hosts[HOST], log=lines.append) as night:
        assert held(HOST) is night and not night.production_down
        assert night.checks_host().production is not None  # before the stop: production is checked
        assert night.hold(first) is first  # type: ignore[arg-type]
        assert night.production_down
        # the next run's checks see no production (it is down on purpose) and its guard is not used
        assert night.checks_host().production is None
        assert night.hold(second) is first  # type: ignore[arg-type]
        runs = [a_run(config, "qwen3-30b-a3b-gguf", "r1"), a_run(config, "gpt-oss-120b-gguf", "r2")]
        for r in runs:
            night.ran(r)
        assert first.exits == 0  # not started again between runs
    assert held(HOST) is None
    assert (first.enters, first.exits, second.enters, second.exits) == (1, 1, 0, 0)
    assert (night.stops, night.starts) == (1, 1)
    for r in runs:  # every run of the night carries its one outage
        assert r.run.production_down_at == first.stopped_at and r.run.production_up_at == first.restored_at
        assert r.production_restored is True
    assert any("stopped once for the night" in ln for ln in lines)
    assert any("started again once after 2 run(s): healthy" in ln for ln in lines)


def test_a_failed_restore_is_said_on_every_run_of_the_night(config):
    guard = StandInGuard(restores=False)
    with HostNight(HOST, config.hosts[HOST], log=lambda _: None) as night:
        night.hold(guard)  # type: ignore[arg-type]
        runs = [a_run(config, "qwen3-30b-a3b-gguf", "r1"), a_run(config, "gpt-oss-120b-gguf", "r2")]
        for r in runs:
            night.ran(r)
    for r in runs:
        assert r.production_restored is False
        assert f"production on host {HOST} NOT restored: production did not answer" in (
            r.run.failure_reason or ""
        )


def test_production_is_started_again_when_the_night_ends_by_an_exception(config):
    guard = StandInGuard()
    with pytest.raises(KeyboardInterrupt), HostNight(HOST, config.hosts[HOST], log=lambda _: None) as night:
        night.hold(guard)  # type: ignore[arg-type]
        raise KeyboardInterrupt  # the UI's Terminate, mid-night
    assert (guard.enters, guard.exits) == (1, 1) and held(HOST) is None


def test_a_night_that_never_stopped_production_starts_nothing(config):
    with HostNight(HOST, config.hosts[HOST], log=lambda _: None) as night:
        pass
    assert (night.stops, night.starts) == (0, 0)


def test_a_night_inside_a_night_joins_it_and_only_the_outer_one_starts_production(config):
    guard = StandInGuard()
    with HostNight(HOST, config.hosts[HOST], log=lambda _: None) as outer:
        with HostNight(HOST, config.hosts[HOST], log=lambda _: None) as inner:
            inner.hold(guard)  # type: ignore[arg-type]
            inner.ran(a_run(config, "qwen3-30b-a3b-gguf", "r1"))
        assert guard.exits == 0 and outer.production_down  # the inner night ended: production still down
        assert outer.hold(StandInGuard()) is guard  # type: ignore[arg-type]
    assert (guard.enters, guard.exits) == (1, 1)
    assert (outer.stops, outer.starts) == (1, 1) and len(outer.runs) == 1


# ---------------------------------------------------------------- the window, before each run


def test_the_window_is_checked_as_a_value_before_each_run(config):
    night = HostNight(HOST, config.hosts[HOST], log=lambda _: None)
    hour = Estimate(3600.0, "median of 3 run(s)")
    closed = night.admit(config, hour, now=NOON)
    assert not closed.fits and closed.reason.startswith(
        "outside the maintenance window ('0 3 * * *' + 6 h"
    ), closed
    assert night.admit(config, hour, now=IN_WINDOW).fits
    # 30 min into a 6-hour window: 5.5 h left, a 5.5 h run plus production's restore does not fit
    long = night.admit(config, Estimate(5.5 * 3600, "median of 2 run(s)"), now=IN_WINDOW)
    assert not long.fits and "production's restore" in long.reason, long
    assert night.admit(config, hour, now=NOON, force=True).fits  # a manual run is not held to it


def test_the_local_host_keeps_no_window(tmp_path):
    config = load_config(write_config(tmp_path))
    local = HostNight("local", config.hosts["local"], log=lambda _: None)
    admitted = local.admit(config, Estimate(3600.0, "default"), now=NOON)
    assert admitted.fits and "keeps no maintenance window" in admitted.reason


def test_a_run_that_does_not_fit_is_deferred_by_name_and_stored_as_deferred(config):
    lines: list[str] = []
    with HostNight(HOST, config.hosts[HOST], log=lines.append) as night:
        result = night.defer(config, target(config, "gpt-oss-120b-gguf"), "r9", "outside the window")
    run = result.run
    assert run.status == DEFERRED and run.fingerprint
    assert run.failure_reason == (
        "deferred to the next night: llamacpp gpt-oss-120b-gguf @ ghcr.io/ggml-org/llama.cpp:server-b11434: "
        "outside the window; production was not stopped for it"
    ), run.failure_reason
    assert [d.name for d in night.deferred] == [
        "llamacpp gpt-oss-120b-gguf @ ghcr.io/ggml-org/llama.cpp:server-b11434"
    ]
    assert night.stops == 0 and lines == [f"[r9] {run.failure_reason}"]


# ---------------------------------------------------------------- a night across Dagster runs
#
# The weekly schedule launches a Dagster run per image version, each its own process: the night is
# carried from one to the next by the real ProductionGuard's marker. Production here is a pair of
# stop / start commands whose runner records them (no fallback armed: that is restore_guard's, tested
# over the real sshd), so what is asserted is how often production is stopped and started.

NIGHT = "2026-12-07"


class Box:
    """Production as the commands see it: up or down, and every stop and start made."""

    def __init__(self) -> None:
        self.up = True
        self.made: list[str] = []

    def run(self, argv, **_kw):
        import subprocess

        if argv[0] in ("stop", "start"):  # not the read of the fallback's record ("sh -c ...")
            self.made.append(argv[0])
            self.up = argv[0] == "start"
        return subprocess.CompletedProcess(argv, 0, "", "")

    def guard(self, state_dir, run_id: str, restore_by: datetime | None = None):
        from strix_pipeline.config import ProductionEngine
        from strix_pipeline.hosts.box.production import ProductionGuard

        prod = ProductionEngine(
            stop_command=["stop"],
            start_command=["start"],
            unit="llama-server.service",
            health_url="http://127.0.0.1:9/health",
            health_timeout_s=1,
        )
        return ProductionGuard(
            HOST,
            prod,
            state_dir=state_dir,
            run_id=run_id,
            runner=self.run,
            healthy=lambda _url: self.up,
            poll_interval_s=0.01,
            fallback=False,
            restore_by=restore_by or datetime.now(UTC) + timedelta(hours=5),
        )


def a_dagster_run(
    config, box, state_dir, member, queued, *, model="qwen3-30b-a3b-gguf", night=NIGHT, runs=True, log=None
):
    """One Dagster run of the night in its own process: its HostNight, one benchmark (the guard held
    as run_docker holds it) unless ``runs`` is False (every run of it deferred)."""
    night_obj = HostNight(
        HOST,
        config.hosts[HOST],
        log=(log if log is not None else lambda _: None),
        night_id=night,
        member=member,
        state_dir=state_dir,
        more_to_come=lambda done: len([r for r in queued if r not in done]),
        restore_held=lambda info: _restored(box, state_dir, member, info),
    )
    with night_obj as n:
        if runs:
            guard = box.guard(state_dir, f"{member}-run")
            if not n.production_down:
                guard.check_marker()
            n.hold(guard)
            n.ran(a_run(config, model, f"{member}-run"))
    return night_obj


def _restored(box, state_dir, member, info):
    guard = box.guard(state_dir, member)
    guard.adopt(info)
    guard.restore()
    return guard


def test_a_night_of_three_dagster_runs_stops_production_once_and_the_last_run_starts_it(config, tmp_path):
    box = Box()
    lines: list[str] = []
    queue = ["A", "B", "C"]  # the night's runs on this host, as the Dagster instance lists them
    a = a_dagster_run(config, box, tmp_path, "A", queue, log=lines.append)
    assert box.made == ["stop"] and not box.up, box.made  # handed over to B and C, not started
    assert a.handed_over == 2 and (a.stops, a.starts) == (1, 0)
    assert a.runs[0].run.production_down_at is not None and a.runs[0].run.production_up_at is None
    assert a.runs[0].production_restored is None  # not restored by this run, and not a failure
    assert any("stays down for 2 more run(s) of night 2026-12-07" in ln for ln in lines), lines
    b = a_dagster_run(config, box, tmp_path, "B", queue, log=lines.append)
    assert box.made == ["stop"], "a later run of the night stopped or started production"
    assert (b.stops, b.starts, b.handed_over) == (0, 0, 1)
    assert any("this run joins it" in ln for ln in lines), lines
    c = a_dagster_run(config, box, tmp_path, "C", queue)
    assert box.made == ["stop", "start"] and box.up
    assert (c.stops, c.starts, c.handed_over) == (0, 1, 0)
    run = c.runs[0]
    assert run.production_restored is True and run.run.production_up_at is not None
    # the outage the last run records is the night's: from A's stop
    assert run.run.production_down_at == a.runs[0].run.production_down_at
    assert not (tmp_path / f"production-not-restored-{HOST}.json").exists()


def test_the_last_run_of_the_night_starts_production_even_when_all_of_it_was_deferred(config, tmp_path):
    box = Box()
    a_dagster_run(config, box, tmp_path, "A", ["A", "B"])
    a_dagster_run(config, box, tmp_path, "B", ["A", "B"], runs=False)  # deferred: no guard of its own
    assert box.made == ["stop", "start"] and box.up


def test_a_run_of_another_night_or_after_the_planned_outage_restores_production_first(config, tmp_path):
    box = Box()
    a_dagster_run(config, box, tmp_path, "A", ["A", "B"])
    assert box.made == ["stop"]
    # B never came; next week's run finds production down: restored before its own stop
    lines: list[str] = []
    a_dagster_run(config, box, tmp_path, "X", ["X"], night="2026-12-14", log=lines.append)
    assert box.made == ["stop", "start", "stop", "start"], box.made
    assert not any("joins it" in ln for ln in lines)

    box2, state = Box(), tmp_path / "late"
    a_dagster_run(config, box2, state, "A", ["A", "B"])
    marker = state / f"production-not-restored-{HOST}.json"
    info = json.loads(marker.read_text())
    marker.write_text(
        json.dumps({**info, "restore_by": (datetime.now(UTC) - timedelta(minutes=1)).isoformat()})
    )
    # the same night, its planned outage over (A is finished: the instance lists B alone): restored first
    a_dagster_run(config, box2, state, "B", ["B"])
    assert box2.made == ["stop", "start", "stop", "start"], box2.made


def test_a_run_that_ends_by_an_exception_starts_production_even_with_runs_to_come(config, tmp_path):
    box = Box()
    night = HostNight(
        HOST,
        config.hosts[HOST],
        log=lambda _: None,
        night_id=NIGHT,
        member="A",
        state_dir=tmp_path,
        more_to_come=lambda done: 1,
    )
    with pytest.raises(KeyboardInterrupt), night:
        night.hold(box.guard(tmp_path, "A-run"))
        raise KeyboardInterrupt
    assert box.made == ["stop", "start"] and night.handed_over == 0


def test_a_night_whose_later_runs_cannot_be_read_starts_production(config, tmp_path):
    box = Box()
    lines: list[str] = []

    def unreadable(done):
        raise RuntimeError("instance unreachable")

    with HostNight(
        HOST,
        config.hosts[HOST],
        log=lines.append,
        night_id=NIGHT,
        member="A",
        state_dir=tmp_path,
        more_to_come=unreadable,
    ) as night:
        night.hold(box.guard(tmp_path, "A-run"))
    assert box.made == ["stop", "start"]
    assert any("not read (instance unreachable): production is started now" in ln for ln in lines)


def test_a_run_stopped_at_its_deadline_starts_production_even_with_runs_to_come(config, tmp_path):
    """Past the restore's time every later run of the night would be deferred: production is not
    handed over to them, it is started now."""
    box = Box()
    night = HostNight(
        HOST,
        config.hosts[HOST],
        log=lambda _: None,
        night_id=NIGHT,
        member="A",
        state_dir=tmp_path,
        more_to_come=lambda done: 2,
    )
    with night:
        night.hold(box.guard(tmp_path, "A-run"))
        late = a_run(config, "qwen3-30b-a3b-gguf", "A-run")
        late.run.status = DEADLINE
        night.ran(late)
    assert box.made == ["stop", "start"] and night.handed_over == 0 and box.up
