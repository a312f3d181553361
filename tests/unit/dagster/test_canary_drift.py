"""The canary tells host drift from an engine change, and an engine change is alerted either way.

The canary (llama.cpp b100, pinned) runs every week beside that week's new release. From week 3 the
host is 1.5x slower for every release (the stand-in's ``host_slow_from``): the canary's series over
time steps in week 3, a confirmed step. The step between b103 (week 2) and b104 (week 3) in the
release series is still an engine change -- alerted, bisectable -- with the canary's movement written
beside it, so the person who reads the alert sees the host moved too. The control: the same weeks
with a steady host and b103 really slower -- that change is alerted with nothing beside it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.notify import Receiver
from support.pipeline_helpers import write_config
from support.versioned_standin import VersionedStandIn

from assets.analysis import regressions, switch_decision
from assets.resources import StrixConfigResource, WarehouseResource
from strix_pipeline.analysis.changes import stored_changes
from strix_pipeline.config_load import load_config
from strix_pipeline.registry.versions import version_sort_key
from strix_pipeline.runner import BenchmarkTarget
from strix_pipeline.warehouse import Warehouse

WEEK0 = datetime.now(UTC).replace(microsecond=0) - timedelta(weeks=8)


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


class _Image:
    def __init__(self, tag: str) -> None:
        self.tag = self.version = tag
        self.digest = f"local:{tag}"
        self.sort_key = version_sort_key(tag, None)


def weeks(standin: VersionedStandIn) -> list:
    """Six weekly runs: the canary b100, then that week's new release b101..b106."""
    results = []
    for week in range(6):
        for n, tag in enumerate(("b100", f"b{101 + week}")):
            standin.clock = WEEK0 + timedelta(weeks=week, minutes=30 * n)
            target = BenchmarkTarget("local", "llamacpp", "gemma3-270m", "tiny", _Image(tag))
            run_id = f"w{week}-{tag}"
            results.append(standin(None, target, run_id=run_id, dagster_run_id=run_id))
    return results


def evaluate(tmp_path, monkeypatch, receiver, standin) -> list:
    path = write_config(tmp_path)
    path.write_text(path.read_text() + '\n[analysis]\ncanary = "llamacpp:b100"\n')
    config = load_config(path)
    monkeypatch.setenv(config.decision.webhook_url_env, receiver.url)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_runs(weeks(standin))
    strix = StrixConfigResource(config_path=str(path))
    warehouse = WarehouseResource(config_path=str(path))
    regressions(strix=strix, warehouse=warehouse)
    switch_decision(strix=strix, warehouse=warehouse)
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        return [c for c in stored_changes(wh) if c.metric == "ttft_p95_ms" and c.level == 5]


def test_a_host_change_seen_by_the_canary_is_drift_not_a_regression(tmp_path, monkeypatch, receiver):
    host_change = WEEK0 + timedelta(weeks=3)
    standin = VersionedStandIn(first_slow=10_000, host_slow_from=host_change)
    changes = evaluate(tmp_path, monkeypatch, receiver, standin)
    canary = [c for c in changes if (c.host_drift or "").startswith("canary:")]
    assert canary, changes
    assert all(c.version_before == c.version_after == "b100" for c in canary)
    assert "llamacpp b100" in canary[0].host_drift and "host facts" in canary[0].host_drift
    engine = [c for c in changes if c not in canary]
    step = [c for c in engine if (c.version_before, c.version_after) == ("b103", "b104")]
    assert step and step[0].status == "confirmed" and step[0].is_regression, [
        (c.version_before, c.version_after, c.status, c.magnitude_pct, c.host_drift) for c in engine
    ]
    assert step[0].host_drift is None and step[0].is_confirmed_regression
    assert step[0].canary_moved.startswith("canary llamacpp b100"), step[0].canary_moved
    assert "host facts" in step[0].canary_moved
    alerts = [b["text"] for b in receiver.bodies if "confirmed regression" in b["text"]]
    assert len(alerts) == 1 and "from b103 to b104" in alerts[0], receiver.bodies
    assert "beside it: canary llamacpp b100" in alerts[0]


def test_the_control_a_steady_canary_leaves_the_engine_regression_alerted(tmp_path, monkeypatch, receiver):
    standin = VersionedStandIn(first_slow=103)
    changes = evaluate(tmp_path, monkeypatch, receiver, standin)
    assert not [c for c in changes if c.host_drift or c.canary_moved]
    (step,) = [c for c in changes if (c.version_before, c.version_after) == ("b102", "b103")]
    assert step.is_confirmed_regression
    alerts = [b["text"] for b in receiver.bodies if "confirmed regression" in b["text"]]
    assert len(alerts) == 1 and "from b102 to b103" in alerts[0]
