"""The marker production's guard leaves on the controller: production stopped and not yet restored,
or held down on purpose for the later runs of one night. A later run reads it first: it restores
production, or joins the night that holds it.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from strix_pipeline.paths import inside


def marker_path(state_dir: str | Path, host_name: str) -> Path:
    return inside(Path(state_dir), f"production-not-restored-{host_name}.json")


HELD_FOR_NIGHT = "held_for_night"


def read_marker(state_dir: str | Path, host_name: str) -> dict[str, Any] | None:
    """The marker an earlier run left for ``host_name`` (None: none, or not readable JSON)."""
    try:
        info = json.loads(marker_path(state_dir, host_name).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def held_for_night(info: dict[str, Any] | None, night: str, now: datetime) -> bool:
    """``info`` is production held down on purpose for the later runs of ``night``, its planned outage
    not over: a run of that night joins it instead of restoring production first."""
    if not info or info.get("state") != HELD_FOR_NIGHT or info.get("night") != night:
        return False
    try:
        restore_by = datetime.fromisoformat(str(info.get("restore_by")))
    except ValueError:
        return False
    return now < restore_by


def pass_on_held(
    state_dir: str | Path, host_name: str, info: dict[str, Any], *, done: list[str], remaining: int
) -> None:
    """A night's held marker passed on unchanged by a run that never touched production, its runs done
    and still to come brought up to date (the guard's :meth:`ProductionGuard.hand_over` writes it first)."""
    marker_path(state_dir, host_name).write_text(json.dumps({**info, "done": done, "remaining": remaining}))


def when(text: object) -> datetime | None:
    """A time the marker wrote (None: none, or not a time)."""
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None
