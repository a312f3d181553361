"""Facts of the engine image that decide comparability: its ROCm version and the GPU firmware it sees.

Pure parsing, no I/O: :class:`strix_pipeline.hosts.docker.launcher.DockerEngine` runs the commands inside the
running engine container and hands the text here. "Not available" is ``None``, never ``""`` or a
value read somewhere else (the controller's, another image's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

ROCM_VERSION_FILE = "/opt/rocm/.info/version"
ROCM_ENV_KEYS = ("ROCM_VERSION",)
ROCM_LABEL_KEYS = ("com.amd.rocm.version", "rocm.version", "org.amd.rocm.version")

# amd-smi first (the tool ROCm ships now), rocm-smi for older images
FIRMWARE_COMMANDS: tuple[tuple[str, list[str]], ...] = (
    ("amd-smi", ["amd-smi", "firmware", "--json"]),
    ("rocm-smi", ["rocm-smi", "--showfwinfo", "--json"]),
)

_VERSION = re.compile(r"^\d+(\.\d+)*([-.+~][0-9A-Za-z.+~-]+)?$")
_ABSENT = {"", "n/a", "na", "none", "null", "unknown", "not supported", "0", "0x00000000", "00.00.00.00"}
_ROCM_SMI_FW_KEY = re.compile(r"^(?P<name>.+?)\s+firmware version$", re.IGNORECASE)


def _clean_version(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    return text if text and _VERSION.match(text) else None


def rocm_version_from(
    version_file: str | None,
    env: Iterable[str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> str | None:
    """The image's ROCm version: the content of ``/opt/rocm/.info/version`` (ROCm images), else the
    ``ROCM_VERSION`` of its environment (``Config.Env``, ``KEY=value`` strings), else an OCI label;
    None when none gives a version-looking value."""
    if version_file:
        first = version_file.strip().splitlines()[0] if version_file.strip() else ""
        found = _clean_version(first)
        if found:
            return found
    for item in env or ():
        key, sep, value = str(item).partition("=")
        if sep and key in ROCM_ENV_KEYS:
            found = _clean_version(value)
            if found:
                return found
    for key in ROCM_LABEL_KEYS:
        found = _clean_version((labels or {}).get(key))
        if found:
            return found
    return None


def _fw_text(value: Any) -> str | None:
    if isinstance(value, dict):  # newer amd-smi: {"value": ..., "unit": ...}
        value = value.get("value")
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    return None if text.lower() in _ABSENT else text


def _amd_smi_entries(fw_list: Any) -> list[tuple[str, str]]:
    # a list of {"fw_id"|"fw_name": ..., "fw_version": ...}; some builds key them {"FW 0": {...}}
    items = fw_list.values() if isinstance(fw_list, dict) else fw_list
    out: list[tuple[str, str]] = []
    if not isinstance(items, Iterable):
        return out
    for entry in items:
        if not isinstance(entry, dict):
            continue
        name = entry.get("fw_id") or entry.get("fw_name") or entry.get("name")
        version = _fw_text(entry.get("fw_version", entry.get("version")))
        if name and version:
            out.append((str(name).strip().removeprefix("FW_ID_").removeprefix("AMDSMI_FW_ID_"), version))
    return out


def parse_amd_smi_firmware(text: str) -> list[list[tuple[str, str]]]:
    """``amd-smi firmware --json``: ``[{"gpu": 0, "fw_list": [{"fw_id": "CP_ME", "fw_version": …}]}]``
    (newer builds wrap the list in ``{"gpu_data": […]}``) -> per GPU, its (name, version) pairs."""
    data = json.loads(text)
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    if not isinstance(gpus, list):
        return []
    return [
        entries for gpu in gpus if isinstance(gpu, dict) and (entries := _amd_smi_entries(gpu.get("fw_list")))
    ]


def parse_rocm_smi_firmware(text: str) -> list[list[tuple[str, str]]]:
    """``rocm-smi --showfwinfo --json``: ``{"card0": {"ME firmware version": "…", …}}`` -> per card."""
    data = json.loads(text)
    out: list[list[tuple[str, str]]] = []
    if not isinstance(data, dict):
        return out
    for card, fields in data.items():
        if not str(card).startswith("card") or not isinstance(fields, dict):
            continue
        entries = []
        for key, value in fields.items():
            m = _ROCM_SMI_FW_KEY.match(str(key).strip())
            version = _fw_text(value)
            if m and version:
                entries.append((m.group("name").strip().replace(" ", "_"), version))
        if entries:
            out.append(entries)
    return out


FIRMWARE_PARSERS = {"amd-smi": parse_amd_smi_firmware, "rocm-smi": parse_rocm_smi_firmware}


def firmware_summary(gpus: list[list[tuple[str, str]]]) -> str | None:
    """Compact and stable: ``fw CP_ME=41,MEC=…`` (sorted by name); with several GPUs each is prefixed
    ``gpu<i>:`` and they are joined by a space. Absent versions (N/A, 0) are left out; nothing -> None."""
    parts = []
    for i, entries in enumerate(gpus):
        body = ",".join(f"{name}={version}" for name, version in sorted(dict(entries).items()))
        if body:
            parts.append(f"gpu{i}:{body}" if len(gpus) > 1 else body)
    return f"fw {' '.join(parts)}" if parts else None


def read_firmware(run: Any) -> str | None:
    """The first firmware tool ``run`` (argv -> (exit code, output)) answers; a missing or failing
    tool, or output that does not parse, gives None (nothing changes)."""
    for tool, argv in FIRMWARE_COMMANDS:
        try:
            code, text = run(argv)
            if code != 0:
                continue
            summary = firmware_summary(FIRMWARE_PARSERS[tool](text))
        except Exception:  # noqa: BLE001 - no tool, no device, not JSON: not available
            continue
        if summary:
            return summary
    return None


def append_firmware(current: str | None, summary: str | None) -> str | None:
    """``vbios card1=…`` from the probe, then ``; fw …`` from the engine image; either may be absent."""
    if not summary:
        return current
    return f"{current}; {summary}" if current else summary
