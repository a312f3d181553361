"""rocm-smi / amd-smi JSON as readings, and the cross-check of the SMI tools against sysfs."""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from strix_pipeline.memory.tree import CARD_NAME, UNIT_BYTES, Reading
from strix_pipeline.records import MemorySample
from strix_pipeline.units import gib_text

log = logging.getLogger(__name__)

# Each metric as the two tools name it: (rocm-smi's key, amd-smi's key), None where the tool has no
# such field. One table, so that the cross-check compares the same quantity under both names.
_SMI_KEYS: dict[str, tuple[str | None, str]] = {
    "vram_total": ("VRAM Total Memory (B)", "total_vram"),
    "vram_used": ("VRAM Total Used Memory (B)", "used_vram"),
    "vram_free": (None, "free_vram"),
    # rocm-smi names the types as rsmiBindings.memory_type_l spells them: VRAM, VIS_VRAM, GTT
    # (ROCm/rocm_smi_lib python_smi_tools/rocm_smi.py showMemInfo: '%s Total Memory (B)' % mem)
    "vis_vram_total": ("VIS_VRAM Total Memory (B)", "total_visible_vram"),
    "vis_vram_used": ("VIS_VRAM Total Used Memory (B)", "used_visible_vram"),
    "vis_vram_free": (None, "free_visible_vram"),
    "gtt_total": ("GTT Total Memory (B)", "total_gtt"),
    "gtt_used": ("GTT Total Used Memory (B)", "used_gtt"),
    "gtt_free": (None, "free_gtt"),
}
_ROCM_SMI_KEYS = {rocm: metric for metric, (rocm, _) in _SMI_KEYS.items() if rocm is not None}
_AMD_SMI_KEYS = {amd: metric for metric, (_, amd) in _SMI_KEYS.items()}


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value.strip()))
        except ValueError:
            return None  # "N/A"
    return None


def _smi_readings(
    source: str, fields: dict[str, Any], keys: dict[str, str], to_bytes: Callable[[Any], int | None]
) -> list[Reading]:
    """One device's block of an SMI tool's JSON as readings; a field that is not a number is left out."""
    return [
        Reading(source, metric, v)
        for key, metric in keys.items()
        if (v := to_bytes(fields.get(key))) is not None
    ]


def parse_rocm_smi_json(text: str) -> list[Reading]:
    """``rocm-smi --showmeminfo vram gtt --json``: {"card0": {"VRAM Total Memory (B)": "…", …}}.

    Values are strings of bytes; other keys (Card SKU, GFX Version, a "system" block) are ignored.
    """
    data = json.loads(text)
    out: list[Reading] = []
    if not isinstance(data, dict):
        return out
    for card, fields in data.items():
        if not CARD_NAME.match(str(card)) or not isinstance(fields, dict):
            continue
        out += _smi_readings(f"rocm-smi:{card}", fields, _ROCM_SMI_KEYS, _int_or_none)
    return out


def _amd_smi_bytes(field: Any) -> int | None:
    if isinstance(field, dict):
        value = _int_or_none(field.get("value"))
        if value is None:
            return None
        # amd-smi's "MB" is 2**20 bytes (it divides bytes by 1024*1024)
        return value * UNIT_BYTES.get(str(field.get("unit", "B")).upper(), 1)
    return None  # "N/A" or a bare number without a unit: not trusted


def parse_amd_smi_json(text: str) -> list[Reading]:
    """``amd-smi metric --mem-usage --json``: older builds give a list of GPUs, newer ones
    ``{"gpu_data": [...]}``; a field may be ``"N/A"`` (as a value or as the whole field)."""
    data = json.loads(text)
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    out: list[Reading] = []
    if not isinstance(gpus, list):
        return out
    for i, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            continue
        index = gpu.get("gpu", i)
        usage = gpu.get("mem_usage")
        if not isinstance(usage, dict):
            continue
        out += _smi_readings(f"amd-smi:{index}", usage, _AMD_SMI_KEYS, _amd_smi_bytes)
    return out


# The tools that read the GPU's memory themselves: the cross-check of the sysfs counters, since one
# counter alone is not to be trusted on unified memory.
SMI_COMMANDS: dict[str, tuple[list[str], Callable[[str], list[Reading]]]] = {
    "rocm-smi": (["rocm-smi", "--showmeminfo", "vram", "gtt", "--json"], parse_rocm_smi_json),
    "amd-smi": (["amd-smi", "metric", "--mem-usage", "--json"], parse_amd_smi_json),
}
SMI_PHASES = ("baseline", "idle", "after_stop")  # read once at each: before start, after load, after stop


@dataclass(frozen=True)
class SmiRead:
    """What the SMI tools gave: their readings, and a note for each tool whose output could not be read
    (the run records the notes: a cross-check that silently read nothing is no cross-check)."""

    readings: list[Reading]
    notes: list[str]


# argv -> (exit code, stdout, stderr): the tools print libdrm warnings on stderr (``amdgpu_get_auth
# … failed``), so stdout is parsed alone
SmiRunner = Callable[[list[str]], tuple[int, str, str]]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def read_smi(run: SmiRunner) -> SmiRead:
    """Every SMI tool ``run`` can execute, its stdout parsed apart from its stderr. A tool that is not
    there (exit 126/127) gives nothing ("not available" there, not zero); one that ran but whose
    stdout does not parse, or that failed, gives a note naming it, with its last stderr line."""
    out: list[Reading] = []
    notes: list[str] = []
    for tool, (argv, parse) in SMI_COMMANDS.items():
        try:
            code, stdout, stderr = run(argv)
        except Exception as e:  # noqa: BLE001 - no such executable in the image, no container: not available
            log.debug("%s: %s", tool, e)
            continue
        if code in (126, 127) or (code != 0 and not stdout.strip() and "not found" in stderr):
            continue
        said = f" (stderr: {_last_line(stderr)})" if stderr.strip() else ""
        if code != 0:
            notes.append(f"{tool} exited {code}{said}")
            continue
        try:
            out += parse(stdout)
        except (ValueError, TypeError, AttributeError) as e:
            notes.append(f"{tool} printed no readable JSON on stdout ({type(e).__name__}: {e}){said}")
    for n in notes:
        log.warning("SMI: %s", n)
    return SmiRead(out, notes)


class SmiSource:
    """The SMI tools as a sampler's ``smi`` callable: the readings go to the samples, each note (a tool
    whose output could not be read) is kept once in :attr:`notes` for the run's record."""

    def __init__(self, run: SmiRunner) -> None:
        self.run = run
        self.notes: list[str] = []

    def keep(self, got: SmiRead) -> list[Reading]:
        self.notes += [n for n in got.notes if n not in self.notes]
        return got.readings

    def __call__(self) -> list[Reading]:
        return self.keep(read_smi(self.run))


def run_here(argv: list[str]) -> tuple[int, str, str]:
    """Run an SMI tool on this machine (the `local` host), if it is installed."""
    import shutil
    import subprocess

    if not shutil.which(argv[0]):
        return 127, "", f"{argv[0]}: not found"
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def counter_disagreements(
    samples: Iterable[MemorySample], *, tolerance_bytes: int = 2**29, tolerance_frac: float = 0.05
) -> list[str]:
    """Where the SMI tools and the sysfs counters disagree about VRAM + GTT in use, per phase
    (median of each); beyond max(tolerance_bytes, tolerance_frac of the larger) it is flagged.

    A consistency check only: rocm_smi_lib reads the same ``mem_info_*`` files, so a blind sysfs
    counter is blind in rocm-smi too; the independent check is ``summary.meminfo_disagreement``."""
    per: dict[tuple[str, str], dict[datetime, int]] = {}
    for m in samples:
        if m.phase in SMI_PHASES and m.metric in ("vram_used", "gtt_used"):
            tool = m.source.split(":", 1)[0]  # "sysfs", "rocm-smi", "amd-smi"
            at = per.setdefault((m.phase, tool), {})
            at[m.sampled_at] = at.get(m.sampled_at, 0) + m.value_bytes
    out = []
    for phase in SMI_PHASES:
        sysfs = per.get((phase, "sysfs"))
        if not sysfs:
            continue
        ref = statistics.median(sysfs.values())
        for tool in ("rocm-smi", "amd-smi"):
            seen = per.get((phase, tool))
            if not seen:
                continue
            other = statistics.median(seen.values())
            if abs(other - ref) > max(tolerance_bytes, tolerance_frac * max(other, ref)):
                out.append(f"at {phase}: sysfs {gib_text(ref)} vs {tool} {gib_text(other)}")
    return out
