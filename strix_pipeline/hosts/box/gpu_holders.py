"""Who holds the Box's GPU memory before a benchmark, and whether the idle Box is idle enough.

Checked while production still serves: containers of any label with a GPU device
(``/dev/kfd``, ``/dev/dri``) other than production, the pipeline's probe and its own managed engines
(removed as leftovers), and the processes the SMI tools list (``amd-smi process --json``, else
``rocm-smi --showpids --json``) other than production's. A holder found refuses the run before
production stops, naming it. After the stop, memory in use must settle under the host's absolute idle
ceiling (``idle_ceiling_gb``: the field report's idle Box held ~0.6 GB of VRAM + GTT); above it the run
is refused too (production is restored by its guard), naming what the SMI tools still list.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.memory.smi import SmiRunner
from strix_pipeline.units import GB, gib_text

log = logging.getLogger(__name__)

GPU_DEVICES = ("/dev/kfd", "/dev/dri")
MANAGED_LABEL = "strix.managed"
PROBE_LABEL = "strix.probe"


@dataclass(frozen=True)
class Holder:
    """A container or process that holds (or may hold) GPU memory and is not the pipeline's."""

    kind: str  # "container" | "process"
    name: str
    detail: str  # image and labels, or pid and memory

    def describe(self) -> str:
        return f"{self.kind} {self.name} ({self.detail})"


def _has_gpu_device(attrs: dict[str, Any]) -> bool:
    host = attrs.get("HostConfig") or {}
    if host.get("Privileged"):
        return True
    for d in host.get("Devices") or []:
        paths = (d.get("PathInContainer") or "", d.get("PathOnHost") or "")
        if any(p == g or p.startswith(g + "/") for p in paths for g in GPU_DEVICES):
            return True
    return False


def gpu_containers(
    client: Any, *, production: str | None, allowed: frozenset[str] = frozenset()
) -> list[Holder]:
    """Running containers with a GPU device that are neither production, a probe, a managed engine nor
    one the owner allowed by name (production's ``allowed_device_holders``)."""
    out = []
    for c in client.containers.list(filters={"status": "running"}):
        labels = c.labels or {}
        if c.name == production or labels.get(PROBE_LABEL) == "true" or labels.get(MANAGED_LABEL) == "true":
            continue
        if c.name in allowed:
            continue
        if not _has_gpu_device(c.attrs or {}):
            continue
        image = ",".join(getattr(c.image, "tags", None) or []) if c.image is not None else "?"
        shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "no labels"
        out.append(Holder("container", c.name, f"{image or c.id[:12]}, {shown}"))
    return out


def production_pids(client: Any, production: str | None) -> set[int]:
    """The host pids of the production container's processes (``docker top``); empty without one."""
    if not production:
        return set()
    try:
        top = client.containers.get(production).top()
    except Exception as e:  # noqa: BLE001 - not running or gone: it holds nothing
        log.debug("production %s: no processes (%s)", production, e)
        return set()
    titles = [t.upper() for t in top.get("Titles") or []]
    col = titles.index("PID") if "PID" in titles else 1
    pids = set()
    for row in top.get("Processes") or []:
        try:
            pids.add(int(row[col]))
        except (ValueError, IndexError):
            continue
    return pids


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    bytes: int | None  # the memory the tool gives it (VRAM + GTT for amd-smi), None: not said


def _amd_value(field: Any) -> int | None:
    if isinstance(field, dict) and isinstance(field.get("value"), int):
        unit = str(field.get("unit", "B")).upper()
        return field["value"] * {"B": 1, "KB": 1024, "MB": 2**20, "GB": 2**30}.get(unit, 1)
    return None


def parse_amd_smi_process(text: str) -> list[GpuProcess]:
    """``amd-smi process --json``: per GPU a ``process_list`` of ``{"process_info": {...}}`` or of the
    string "No running processes detected" (ROCm/amdsmi amdsmi_cli/amdsmi_commands.py ``process``);
    newer builds wrap the GPUs as ``{"gpu_data": [...]}``."""
    data = json.loads(text)
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    out = []
    for gpu in gpus if isinstance(gpus, list) else []:
        for item in (gpu or {}).get("process_list") or []:
            info = item.get("process_info") if isinstance(item, dict) else None
            if not isinstance(info, dict) or "pid" not in info:
                continue
            usage = info.get("memory_usage") or {}
            parts = [_amd_value(usage.get(k)) for k in ("vram_mem", "gtt_mem")]
            known = [p for p in parts if p is not None]
            held = sum(known) if known else _amd_value(info.get("mem_usage"))
            out.append(GpuProcess(int(info["pid"]), str(info.get("name") or "?"), held))
    return out


def parse_rocm_smi_pids(text: str) -> list[GpuProcess]:
    """``rocm-smi --showpids --json``: ``{"system": {"PID<pid>": "<name>, <gpus>, <vram>, <sdma>,
    <cu>"}}`` (ROCm/rocm_smi_lib python_smi_tools/rocm_smi.py ``showPids`` / ``print2DArray``); no
    KFD process: nothing on stdout ("No JSON data to report" is a warning on stderr)."""
    if not text.strip():
        return []
    data = json.loads(text)
    out = []
    for key, value in ((data or {}).get("system") or {}).items():
        if not str(key).startswith("PID"):
            continue
        parts = [p.strip() for p in str(value).split(",")]
        try:
            pid = int(str(key)[3:])
        except ValueError:
            continue
        vram = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
        out.append(GpuProcess(pid, parts[0] if parts else "?", vram))
    return out


PROCESS_COMMANDS: tuple[tuple[str, list[str], Callable[[str], list[GpuProcess]]], ...] = (
    ("amd-smi", ["amd-smi", "process", "--json"], parse_amd_smi_process),
    ("rocm-smi", ["rocm-smi", "--showpids", "--json"], parse_rocm_smi_pids),
)


@dataclass(frozen=True)
class ProcessList:
    processes: list[GpuProcess] | None  # None: no tool answered
    tool: str | None
    note: str | None = None  # a tool that ran but whose stdout did not parse


def gpu_processes(run: SmiRunner) -> ProcessList:
    """The KFD processes the first SMI tool that answers lists (stdout parsed apart from stderr)."""
    notes = []
    for tool, argv, parse in PROCESS_COMMANDS:
        try:
            code, stdout, stderr = run(argv)
        except Exception as e:  # noqa: BLE001 - no such tool there
            log.debug("%s: %s", tool, e)
            continue
        if code != 0:
            continue
        try:
            return ProcessList(parse(stdout), tool)
        except (ValueError, TypeError, AttributeError) as e:
            notes.append(f"{tool} process list not readable ({type(e).__name__}: {e})")
    return ProcessList(None, None, "; ".join(notes) or None)


def foreign_holders(
    client: Any, run_smi: SmiRunner | None, *, production: str | None, allowed: frozenset[str] = frozenset()
) -> tuple[list[Holder], str | None]:
    """Every holder of GPU memory that is not the pipeline's, production's or allowed by name (a
    container's, a process's), and a note when the SMI tools could not say (no tool in the probe
    image, or output that did not parse)."""
    found = gpu_containers(client, production=production, allowed=allowed)
    if run_smi is None:
        return found, "no probe: GPU processes not listed"
    listed = gpu_processes(run_smi)
    if listed.processes is None:
        return found, listed.note or "no SMI tool answered in the probe: GPU processes not listed"
    ours = production_pids(client, production)
    for p in listed.processes:
        if p.pid in ours or p.name in allowed:
            continue
        held = gib_text(p.bytes) if p.bytes is not None else "memory not said"
        found.append(Holder("process", f"{p.name} pid {p.pid}", f"{held}, listed by {listed.tool}"))
    return found, None


def check_no_foreign_holders(
    client: Any, run_smi: SmiRunner | None, *, production: str | None, allowed: frozenset[str] = frozenset()
) -> str | None:
    """Refuse (``failed_guard``) while anything else holds GPU memory; returns a note when the SMI
    tools could not list the processes (the run records it)."""
    holders, note = foreign_holders(client, run_smi, production=production, allowed=allowed)
    if holders:
        raise EngineStartError(
            "failed_guard",
            "GPU memory is held by something other than production and the pipeline, so a benchmark "
            "would measure beside it; production was not stopped: "
            + "; ".join(h.describe() for h in holders),
        )
    return note


def check_idle_ceiling(
    in_use_bytes: int | None, ceiling_gb: float | None, run_smi: SmiRunner | None, *, what: str = "VRAM + GTT"
) -> None:
    """Refuse (``failed_guard``) when memory in use with production stopped is above the host's
    absolute idle ceiling: whatever holds it is named as far as the SMI tools can tell."""
    if ceiling_gb is None or in_use_bytes is None or in_use_bytes <= ceiling_gb * GB:
        return
    named = ""
    if run_smi is not None:
        listed = gpu_processes(run_smi)
        if listed.processes:
            named = "; held by " + "; ".join(
                f"{p.name} pid {p.pid} ({gib_text(p.bytes) if p.bytes is not None else '?'})"
                for p in listed.processes
            )
    raise EngineStartError(
        "failed_guard",
        f"memory in use with production stopped is {in_use_bytes / GB:.2f} GB ({what}), above the host's "
        f"idle ceiling idle_ceiling_gb {ceiling_gb:g} GB: not an idle Box{named}",
    )
