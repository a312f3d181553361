"""What the automations will run once turned on, printed before the Dagster UI starts (``make ui``).

Every automation that can start an engine is off by default (STOPPED): starting the UI and its daemon
launches no benchmark the user did not ask for. This says which ones there are, when each would run
and what it would start, so turning one on is a choice made knowing that.
"""

import sys

import dagster as dg

from strix_dagster.definitions import load_definitions


def _first_sentence(text: str | None) -> str:
    return " ".join((text or "").split()).split(". ", 1)[0].rstrip(".")


def _status(s: dg.ScheduleDefinition | dg.SensorDefinition) -> str:
    status = s.default_status
    return "on" if status is not None and status.value == "RUNNING" else "off"


def automations_text(defs: dg.Definitions) -> str:
    """One line per schedule and sensor: its name, whether it starts on, when it runs, what it does."""
    repo = defs.get_repository_def()
    lines = ["Automations (they start engines; each stays off until you turn it on under Automation):"]
    for s in repo.schedule_defs:
        when = f"cron '{s.cron_schedule}'" + (f" ({s.execution_timezone})" if s.execution_timezone else "")
        lines.append(f"  - {s.name} [{_status(s)}]: {when}; {_first_sentence(s.description)}")
    for s in repo.sensor_defs:
        lines.append(
            f"  - {s.name} [{_status(s)}]: checks every {s.minimum_interval_seconds} s once on; "
            f"{_first_sentence(s.description)}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(automations_text(load_definitions()) + "\n")
