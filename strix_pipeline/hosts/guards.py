"""Checks around an engine start: one engine at a time in one memory pool, and nothing left behind.

Before a start: leftover managed containers are stopped (and returned, so the run records them),
the port is free, memory is back near the idle baseline, and the profile's reservations fit the
host's budget. After the stop: memory returns to baseline within a timeout, else the run is flagged.
A guard that refuses raises :class:`EngineStartError` with status ``failed_guard`` and its numbers.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.engines.base import EngineSpec, OverBudget, Reservation, check_budget
from strix_pipeline.hosts.box.gpu_holders import check_idle_ceiling
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.memory import wait_until
from strix_pipeline.memory.smi import SmiRunner
from strix_pipeline.units import GB

log = logging.getLogger(__name__)

MANAGED_LABEL = "strix.managed"
RUN_LABEL = "strix.run_id"


@dataclass(frozen=True)
class Leftover:
    """A managed engine container found running (or stopped) before a start, and removed."""

    container_id: str
    name: str
    image: str
    run_id: str | None  # the run that started it
    status: str  # its state when found

    def describe(self) -> str:
        return (
            f"{self.name} ({self.container_id[:12]}, {self.image}, run {self.run_id or '?'}, {self.status})"
        )


def clean_leftovers(
    client: Any, *, stop_timeout_s: int = 10, keep_ids: tuple[str, ...] = ()
) -> list[Leftover]:
    """Stop and remove every container labelled ``strix.managed=true``; return what was found.

    A crashed run may leave its engine holding the shared memory pool: the next run must not
    measure beside it. Stopped ones are removed too so names and logs do not pile up.
    """
    found: list[Leftover] = []
    for c in client.containers.list(all=True, filters={"label": f"{MANAGED_LABEL}=true"}):
        if c.id in keep_ids:
            continue
        labels = c.labels or {}
        image = ",".join(getattr(c.image, "tags", None) or []) if c.image is not None else ""
        item = Leftover(
            c.id, c.name, image or labels.get("strix.image", "?"), labels.get(RUN_LABEL), c.status
        )
        log.warning("removing leftover managed container %s", item.describe())
        try:
            if c.status == "running":
                c.stop(timeout=stop_timeout_s)
            c.remove(force=True)
        except Exception as e:  # noqa: BLE001 - NotFound after a racing removal is fine; anything else is logged
            log.warning("could not remove leftover %s: %s", item.describe(), e)
        found.append(item)
    return found


def port_in_use(address: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when something accepts connections there (works for a remote host, unlike bind())."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def check_port_free(address: str, port: int, *, wait_s: float = 10.0, interval_s: float = 0.5) -> None:
    ok, _ = wait_until(lambda: int(port_in_use(address, port)), lambda busy: busy == 0, wait_s, interval_s)
    if not ok:
        raise EngineStartError("failed_guard", f"port {port} on {address} is in use (waited {wait_s:g} s)")


def check_reservations(
    reservations: list[Reservation],
    budget_gb: float | None,
    *,
    what: str = "this configuration",
) -> None:
    """Refuse (``failed_guard``) a run whose up-front reservations exceed the host's memory budget,
    by the one budget rule (``engines.base.check_budget``) that a config load applies too."""
    try:
        check_budget(reservations, budget_gb, what=what)
    except OverBudget as e:
        raise EngineStartError("failed_guard", str(e)) from None


def wait_for_baseline(
    read_in_use: Callable[[], int | None],
    baseline_bytes: int,
    tolerance_bytes: int,
    wait_s: float,
    interval_s: float = 1.0,
) -> int:
    """Wait (bounded) until memory in use is within tolerance of the baseline; return the reading."""
    ok, value = wait_until(read_in_use, lambda v: v - baseline_bytes <= tolerance_bytes, wait_s, interval_s)
    if not ok:
        shown = "no reading" if value is None else f"{value / GB:.2f} GB"
        raise EngineStartError(
            "failed_guard",
            f"memory in use {shown} did not come back within {tolerance_bytes / GB:.2f} GB of the idle "
            f"baseline {baseline_bytes / GB:.2f} GB in {wait_s:g} s",
        )
    assert value is not None
    return value


@dataclass(frozen=True)
class Settled:
    """What :func:`wait_for_settled` saw: settled or not, the reading taken as the baseline, and why."""

    settled: bool
    value: int | None
    note: str | None = None  # set when it did not settle: the run records it


def wait_for_settled(
    read_in_use: Callable[[], int | None],
    tolerance_bytes: int,
    wait_s: float,
    interval_s: float = 1.0,
    settle_s: float = 3.0,
) -> Settled:
    """Without a known idle baseline: wait (bounded by ``wait_s``) until memory in use stops moving --
    consecutive readings spanning ``settle_s`` (at least 3) all within ``tolerance_bytes`` of each
    other -- and return the last one. Production's memory is freed after its stop takes a while, so a
    single reading right after it would be a baseline too high. Never settled: the last reading, with
    a note saying so; no reading at all: None with a note."""
    need = max(3, int(round(settle_s / interval_s)) + 1) if interval_s > 0 else 3
    window: list[int] = []
    deadline = time.monotonic() + wait_s
    last: int | None = None
    max_polls = int(wait_s / interval_s) + need + 2 if interval_s > 0 else need + 2
    for _ in range(max(max_polls, need)):
        value = read_in_use()
        if value is None:
            window.clear()  # a gap in the readings: start over
        else:
            last = value
            window = [*window, value][-need:]
            if len(window) == need and max(window) - min(window) <= tolerance_bytes:
                return Settled(True, value)
        if time.monotonic() >= deadline:
            break
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
    if last is None:
        return Settled(False, None, f"no memory reading before the start (waited {wait_s:g} s): no baseline")
    shown = ", ".join(f"{v / GB:.2f}" for v in window) or "?"
    return Settled(
        False,
        last,
        f"memory in use did not settle within {tolerance_bytes / GB:.2f} GB over {need} readings in "
        f"{wait_s:g} s (last {shown} GB): baseline is the last reading {last / GB:.2f} GB",
    )


def wait_memory_returned(
    read_in_use: Callable[[], int | None],
    baseline_bytes: int | None,
    tolerance_bytes: int,
    timeout_s: float,
    interval_s: float = 1.0,
) -> tuple[bool | None, int | None]:
    """After the stop: (returned to baseline within the timeout, last reading). None: no baseline."""
    if baseline_bytes is None:
        return None, read_in_use()
    ok, value = wait_until(
        read_in_use, lambda v: v - baseline_bytes <= tolerance_bytes, timeout_s, interval_s
    )
    if not ok:
        log.error(
            "memory did not return to baseline after the stop: %s vs baseline %d (tolerance %d) after %g s",
            value,
            baseline_bytes,
            tolerance_bytes,
            timeout_s,
        )
    return ok, value


@dataclass
class Preflight:
    """What the guards found before a start; the run records the leftovers and the baseline."""

    leftovers: list[Leftover] = field(default_factory=list)
    baseline_bytes: int | None = None  # the idle baseline the run compares against
    in_use_bytes: int | None = None  # the reading when the guard let the run start
    baseline_note: str | None = None  # e.g. memory in use never settled before the start

    def leftovers_note(self) -> str | None:
        if not self.leftovers:
            return None
        return "leftover managed containers removed before start: " + "; ".join(
            x.describe() for x in self.leftovers
        )

    def notes(self) -> str | None:
        """Everything the run records from the guards: leftovers removed, a baseline that never settled."""
        return "; ".join(n for n in (self.leftovers_note(), self.baseline_note) if n) or None


def preflight(
    host: DockerHostConfig,
    spec: EngineSpec,
    *,
    client: Any | None = None,
    read_in_use: Callable[[], int | None] | None = None,
    baseline_bytes: int | None = None,
    what: str | None = None,
    port_wait_s: float = 10.0,
    interval_s: float = 1.0,
    settle_s: float = 3.0,
    run_smi: SmiRunner | None = None,
) -> Preflight:
    """Run every before-start guard in order; raise ``EngineStartError('failed_guard')`` on refusal.

    ``baseline_bytes``: the idle baseline (e.g. the previous run's); else ``host.idle_baseline_gb``;
    else, with no config at all, memory in use is waited on until it settles (readings spanning
    ``settle_s`` within ``host.baseline_tolerance_gb`` of each other, at most ``host.baseline_wait_s``)
    and that becomes the baseline; never settled, the run proceeds and ``baseline_note`` says so.
    A settled reading above ``host.idle_ceiling_gb`` is refused, naming what ``run_smi``'s tools list.
    """
    check_reservations(
        spec.reservations, host.memory_budget_gb, what=what or f"{spec.kind} '{spec.served_model_name}'"
    )
    result = Preflight()
    if client is not None:
        result.leftovers = clean_leftovers(client)
    check_port_free(host.address, spec.port, wait_s=port_wait_s, interval_s=min(interval_s, 0.5))
    if read_in_use is not None:
        if baseline_bytes is None and host.idle_baseline_gb is not None:
            baseline_bytes = int(host.idle_baseline_gb * GB)
        tolerance = int(host.baseline_tolerance_gb * GB)
        if baseline_bytes is None:
            settled = wait_for_settled(read_in_use, tolerance, host.baseline_wait_s, interval_s, settle_s)
            if settled.note:
                log.warning("%s", settled.note)
            result.in_use_bytes = result.baseline_bytes = settled.value
            result.baseline_note = settled.note
        else:
            result.in_use_bytes = wait_for_baseline(
                read_in_use, baseline_bytes, tolerance, host.baseline_wait_s, interval_s
            )
            result.baseline_bytes = baseline_bytes
        # whatever is there is no baseline when it is above what an idle Box holds
        check_idle_ceiling(result.in_use_bytes, host.idle_ceiling_gb, run_smi)
    return result


def after_stop(
    host: DockerHostConfig,
    read_in_use: Callable[[], int | None],
    baseline_bytes: int | None,
    *,
    interval_s: float = 1.0,
) -> tuple[bool | None, int | None]:
    """Memory back at baseline within ``host.after_stop_timeout_s``? False flags the run."""
    return wait_memory_returned(
        read_in_use,
        baseline_bytes,
        int(host.baseline_tolerance_gb * GB),
        host.after_stop_timeout_s,
        interval_s,
    )
