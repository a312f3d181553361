"""The production watch sensor, evaluated as the daemon would (build_sensor_context): a Box whose
production's health URL (loopback) does not answer past the grace is reported on the webhook and in the
tick's reason, its state kept in the cursor; a run in progress on the Box skips it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from support.notify import Receiver
from support.pipeline_helpers import write_config
from support.production_health import ProductionHealth

from assets.partitions import HOST_TAG
from assets.resources import StrixConfigResource
from schedules import build_production_watch
from strix_pipeline.config_load import load_config
from strix_pipeline.hosts.box.production_watch import WatchState


@pytest.fixture
def box(tmp_path: Path) -> tuple[Path, ProductionHealth]:
    health = ProductionHealth()
    path = write_config(tmp_path, box=True)
    path.write_text(
        path.read_text()
        + f'\n[hosts.box.production]\ncontainer = "llama-prod"\nhealth_url = "{health.url}"\n'
        + "watch_grace_s = 300\n"
    )
    yield path, health
    health.stop()


def evaluate(path: Path, instance: dg.DagsterInstance, cursor: str | None) -> tuple[dg.SkipReason, str]:
    sensor = build_production_watch(load_config(path))
    assert sensor is not None
    ctx = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"strix": StrixConfigResource(config_path=str(path))}
    )
    result = sensor(ctx)
    assert isinstance(result, dg.SkipReason)
    return result, ctx.cursor


def test_down_past_the_grace_is_alerted_then_back(box, monkeypatch) -> None:
    path, health = box
    hook = Receiver()
    monkeypatch.setenv("STRIX_WEBHOOK_URL", hook.url)
    instance = dg.DagsterInstance.ephemeral()
    try:
        skip, cursor = evaluate(path, instance, None)
        assert skip.skip_message == "box: production healthy" and hook.bodies == []
        health.stop()
        # the first check that finds it down starts the grace; the cursor says since when
        skip, cursor = evaluate(path, instance, cursor)
        assert "box: production not answering" in skip.skip_message and hook.bodies == []
        since = WatchState.read(cursor)["box"].down_since
        assert since is not None
        # the grace (300 s) passed: one alert, on the webhook and as the tick's reason
        earlier = WatchState(since - timedelta(seconds=301))
        skip, cursor = evaluate(path, instance, WatchState.dump({"box": earlier}))
        (sent,) = hook.bodies
        assert sent["text"].startswith(":rotating_light: production on host box has been down for 5 min")
        assert skip.skip_message == sent["text"].removeprefix(":rotating_light: ")
        assert WatchState.read(cursor)["box"].alerted_at is not None
        skip, cursor = evaluate(path, instance, cursor)
        assert len(hook.bodies) == 1 and "still down" in skip.skip_message
        health.start()
        skip, cursor = evaluate(path, instance, cursor)
        assert "production on host box is back" in hook.bodies[1]["text"]
        assert WatchState.read(cursor) == {"box": WatchState()}
    finally:
        hook.close()
        instance.dispose()


def test_a_run_in_progress_on_the_box_skips_it(box) -> None:
    path, health = box
    health.stop()
    instance = dg.DagsterInstance.ephemeral()
    instance.add_run(
        dg.DagsterRun(
            job_name="benchmark_job",
            run_id="a" * 36,
            status=dg.DagsterRunStatus.STARTED,
            tags={HOST_TAG: "box"},
        )
    )
    long_down = WatchState.dump({"box": WatchState(datetime(2026, 1, 1, tzinfo=UTC))})
    skip, cursor = evaluate(path, instance, long_down)
    assert skip.skip_message == f"box: not checked, Dagster run {'a' * 36} is in progress on it"
    assert WatchState.read(cursor) == {"box": WatchState()}
    instance.dispose()
