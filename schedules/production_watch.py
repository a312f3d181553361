"""The production watch sensor: every few minutes, each Box's production health outside runs; an alert
on the webhook and in the sensor's log when it has been down longer than its grace, and when it is back.

Thin: the state machine is strix_pipeline.hosts.box.production_watch; the sensor keeps its states in
its cursor, asks the health URLs, says why a host was skipped (a run in progress on it, tagged with
the host, or a run's marker holding production down) and logs one line per host, so the sensor's
ticks in the UI show each Box's production. Defined only when a Box has a production engine.
"""

from datetime import UTC, datetime

import dagster as dg

from assets.partitions import HOST_TAG
from assets.resources import StrixConfigResource
from strix_pipeline.config import ProductionEngine, StrixConfig
from strix_pipeline.hosts.box.production import http_healthy
from strix_pipeline.hosts.box.production_alerts import ProductionAlerts
from strix_pipeline.hosts.box.production_watch import WatchState, watch
from strix_pipeline.webhook import webhook_url

WATCH_INTERVAL_S = 180
_HOLDING = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def productions(config: StrixConfig) -> dict[str, ProductionEngine]:
    """The Boxes whose production the watch checks: the Docker hosts with a production engine."""
    return {name: h.production for name, h in config.hosts.items() if h.kind == "docker" and h.production}


def run_in_progress(instance: dg.DagsterInstance, host: str) -> str | None:
    """Why a Dagster run holds ``host`` now (one in progress tagged with it), or None."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=_HOLDING, tags={HOST_TAG: host}), limit=1)
    return f"Dagster run {runs[0].run_id} is in progress on it" if runs else None


def build_production_watch(
    config: StrixConfig, interval_s: int = WATCH_INTERVAL_S
) -> dg.SensorDefinition | None:
    """The sensor, RUNNING by default; None when no Box has a production engine (nothing to watch)."""
    if not productions(config):
        return None

    @dg.sensor(
        name="production_watch",
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Checks each Box's production health URL outside runs and alerts on the webhook when it has "
            "been down longer than production.watch_grace_s (default 10 min), and when it is back."
        ),
    )
    def production_watch(context: dg.SensorEvaluationContext, strix: StrixConfigResource) -> dg.SkipReason:
        cfg = strix.get()
        steps = watch(
            productions(cfg),
            WatchState.read(context.cursor),
            now=datetime.now(UTC),
            state_dir=cfg.state_dir(),
            healthy=http_healthy,
            running=lambda host: run_in_progress(context.instance, host),
        )
        alert = ProductionAlerts(webhook_url(cfg), context.log.warning)
        for s in steps.values():
            if s.alert:
                alert(s.alert)  # the webhook, and an ALERT line in the tick's log
            else:
                context.log.info(s.line)
        context.update_cursor(WatchState.dump({host: s.state for host, s in steps.items()}))
        # no run to request: the tick's reason is what the UI lists for it, one host per clause
        return dg.SkipReason("; ".join(s.line for s in steps.values()))

    return production_watch
