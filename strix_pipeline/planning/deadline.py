"""When production's restore begins, and so every run's deadline: one rule for the planner, the runner
and the restore armed on the Box.

Production must answer its health URL by the window's end. Its start and health wait take at most its
``health_timeout_s``; before them the engine's container is removed and production's start issued
(:data:`RESTORE_MARGIN_S`). So the restore begins at window end − health timeout − margin: the Box's own
restore fires then (hosts/box/production.py arms it for then), a run is admitted only when its estimate
ends by then (planning/night_fit.py admit_run, the week's plan) and a run still going then is stopped,
its engine removed, recorded as ``deadline`` (runner/docker_run.py). A host without production has no
restore: its runs' deadline is the window's end.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from strix_pipeline.config import ProductionEngine

# the engine container's removal and production's start command, before its health wait begins
RESTORE_MARGIN_S = 60.0
# production's health timeout when the configuration does not set one
DEFAULT_HEALTH_TIMEOUT_S = float(ProductionEngine.model_fields["health_timeout_s"].default)


def restore_lead_s(production: ProductionEngine | None) -> float:
    """How long before the window's end production's restore begins (0: no production to restore)."""
    if production is None:
        return 0.0
    return float(production.health_timeout_s) + RESTORE_MARGIN_S


# the lead of a production with the default health timeout: the plan's, when it is given no host
DEFAULT_RESTORE_LEAD_S = DEFAULT_HEALTH_TIMEOUT_S + RESTORE_MARGIN_S


def restore_time(window_end: datetime, production: ProductionEngine | None) -> datetime:
    """The restore's time, the runs' deadline: ``window_end`` less :func:`restore_lead_s`."""
    return window_end - timedelta(seconds=restore_lead_s(production))
