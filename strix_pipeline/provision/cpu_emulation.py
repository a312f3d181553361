"""The machine-wide CPU emulation switch: ``STRIX_EMULATE_CPU=avx2`` makes this machine an AVX2-only one
for everything the CPU kind decides.

An AVX-512/AMX machine measures what a fresh AVX2-only EPYC would cost only when every reader of the CPU
flags sees the AVX2 flags: the llama-server build's ISA options, vLLM's dtype choice and its measured
table, the engines' own kernel dispatch (engines/vllm_dtype.py ``avx2_emulation_env``), and what a run,
``strix doctor`` and CI print about the machine. Each of them asks this module, so the switch is defined
once. Not emulated: the instructions the hardware runs elsewhere and its cache and memory speed.

Standard library only: ``.ci/run`` runs this file with the system's python3 before any venv exists
(``python3 strix_pipeline/provision/cpu_emulation.py``: its "cpu flags" line).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ENV = "STRIX_EMULATE_CPU"
AVX2 = "avx2"
KINDS = (AVX2,)
_OFF = ("", "0", "off", "no", "native", "none")
# the flags (/proc/cpuinfo spelling) an AVX2-only CPU (a 2-core EPYC of Zen 2/3) does not have: every
# AVX-512 and AMX flag, and AVX-VNNI (the 256-bit VNNI of AVX-512 generation Intel cores)
MISSING_ON_AVX2 = ("avx512", "amx", "avx_vnni")
# the flags the "cpu flags" line shows: what decides the suite's and vLLM's speed
SHOWN = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def emulated(environ: Mapping[str, str] | None = None) -> str | None:
    """The CPU kind this machine is emulating (``"avx2"``), or None (the CPU as it is)."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip().lower()
    if value in _OFF:
        return None
    if value not in KINDS:
        raise ValueError(f"{ENV}={value!r}: not one of {', '.join(KINDS)} (unset or empty: the CPU as it is)")
    return value


def as_kind(flags: Iterable[str], kind: str | None) -> frozenset[str]:
    """``flags`` as a CPU of ``kind`` presents them (None: unchanged)."""
    if kind is None:
        return frozenset(flags)
    return frozenset(f for f in flags if not f.startswith(MISSING_ON_AVX2))


def seen_flags(flags: Iterable[str], environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """This machine's flags as every reader must see them: the emulated CPU's when the switch is on."""
    return as_kind(flags, emulated(environ))


def label(kind: str | None) -> str | None:
    """How runs and reports name the emulation (``"avx2 emulation"``), None without one."""
    return f"{kind} emulation" if kind else None


def mark(text: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """``text`` (a recorded host fact) with the emulation named after it when the switch is on."""
    name = label(emulated(environ))
    if name is None:
        return text
    return f"{text} ({name})" if text else f"({name})"


def flags_line(cpuinfo: str, environ: Mapping[str, str] | None = None) -> str:
    """CI's "cpu flags" line: the flags that decide the speed, as the tests will see them."""
    real: frozenset[str] = frozenset()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            real = frozenset(value.split())
            break
    kind = emulated(environ)
    seen = as_kind(real, kind)
    line = "cpu flags: " + " ".join(f"{f}={'yes' if f in seen else 'no'}" for f in SHOWN)
    if kind:
        hidden = [f for f in SHOWN if f in real and f not in seen]
        line += f" -- {label(kind)} ON ({ENV}={kind}; the CPU has {' '.join(hidden) or 'none of them'})"
    return line


if __name__ == "__main__":
    try:
        print(flags_line(Path("/proc/cpuinfo").read_text()))
    except ValueError as e:
        sys.exit(str(e))
