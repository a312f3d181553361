"""A confirmed regression reaches the webhook through the pipeline's own path.

The `regressions` asset detects and stores change points (with when each was first confirmed); the
`switch_decision` asset evaluates, then alerts on the regressions confirmed since the previous
evaluation -- both called here as the Dagster run calls them, against a receiver on loopback.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.decision_seed import run_record, run_result
from support.notify import Receiver
from support.pipeline_helpers import write_config

from assets.analysis import regressions, switch_decision
from assets.resources import StrixConfigResource, WarehouseResource
from strix_pipeline.analysis.changepoints import confirmed_since
from strix_pipeline.analysis.changes import stored_changes
from strix_pipeline.config_load import load_config
from strix_pipeline.registry.versions import version_sort_key
from strix_pipeline.warehouse import Warehouse


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _run(i: int, tag: str, p95: float, at: datetime):
    rec = run_record(
        f"llama-{i}",
        "llamacpp",
        host="local",
        repo=None,
        tag=tag,
        digest=f"local:{tag}",
        version=tag,
        sort_key=version_sort_key(tag, None),
        profile="gemma3-270m",
        quant="Q4_K_M",
        started_at=at,
    )
    return run_result(rec, sweep={5: (p95, 100.0)})


def test_confirmed_regression_reaches_the_receiver_once(tmp_path, monkeypatch, receiver):
    cfg_path = write_config(tmp_path)
    config = load_config(cfg_path)
    monkeypatch.setenv(config.decision.webhook_url_env, receiver.url)
    strix = StrixConfigResource(config_path=str(cfg_path))
    warehouse = WarehouseResource(path=str(config.warehouse_path()), lock_retry_s=10.0)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    t0 = datetime.now(UTC) - timedelta(days=10)
    flat = [500.0, 503.0, 498.0, 501.0, 499.0]
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_runs([_run(i, f"b{6000 + i}", v, t0 + timedelta(days=i)) for i, v in enumerate(flat)])
        # the newest build is 30 % slower: one run of it, so the change is provisional
        wh.load_run(_run(9, "b6009", 650.0, t0 + timedelta(days=6)))

    regressions(strix=strix, warehouse=warehouse)
    switch_decision(strix=strix, warehouse=warehouse)
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        (change,) = [c for c in stored_changes(wh) if c.metric == "ttft_p95_ms"]
    assert change.status == "provisional" and change.confirmed_at is None
    assert not any("confirmed regression" in b["text"] for b in receiver.bodies)

    # a repeat run of that build agrees: the regression is confirmed, and the decision alerts on it
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_run(_run(10, "b6009", 648.0, t0 + timedelta(days=7)))
    regressions(strix=strix, warehouse=warehouse)
    result = switch_decision(strix=strix, warehouse=warehouse)
    alerts = [b["text"] for b in receiver.bodies if "confirmed regression" in b["text"]]
    assert len(alerts) == 1, receiver.bodies
    assert "llamacpp @ local concurrency_sweep level 5 ttft_p95_ms" in alerts[0]
    assert "b6004 to b6009" in alerts[0] and f"strix ack {change.change_id}" in alerts[0]
    assert result.metadata["webhook_sent"] is True
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        (change,) = [c for c in stored_changes(wh) if c.metric == "ttft_p95_ms"]
    assert change.status == "confirmed" and change.confirmed_at is not None

    # the next evaluation does not alert on it again
    regressions(strix=strix, warehouse=warehouse)
    switch_decision(strix=strix, warehouse=warehouse)
    assert len([b for b in receiver.bodies if "confirmed regression" in b["text"]]) == 1


def test_confirmed_since_is_the_window_between_evaluations():
    from strix_pipeline.analysis.changepoints import Change

    t = datetime(2026, 9, 1, tzinfo=UTC)

    def ch(at, status="confirmed"):
        return Change(
            "x",
            "f",
            "e",
            "h",
            "ttft_p95_ms",
            "s",
            5,
            "a",
            "b",
            "b",
            30.0,
            1e-4,
            status,
            "active",
            None,
            t,
            confirmed_at=at,
        )

    old, new, later, prov = (
        ch(t),
        ch(t + timedelta(hours=2)),
        ch(t + timedelta(hours=5)),
        ch(None, "provisional"),
    )
    got = confirmed_since([old, new, later, prov], t + timedelta(hours=1), t + timedelta(hours=3))
    assert got == [new] and new.newly_confirmed and not old.newly_confirmed and not later.newly_confirmed
    assert confirmed_since([old, prov], None, t + timedelta(hours=3)) == [old]
