"""The dtype vLLM computes in on a CPU, chosen per CPU.

The checkpoint vLLM serves on host ``local`` is bf16, but bf16 is only fast where the CPU multiplies
bf16 natively: AVX-512-BF16 (``avx512_bf16``) or AMX (``amx_bf16``). Elsewhere oneDNN cannot create a
bf16 linear ("Failed to create oneDNN linear, fallback to torch linear") and vLLM on a 2-core AVX2
Xeon took 17.6 s TTFT p95 at 5 clients against llama-server's 6.1 s: a verdict about a dtype, not
about vLLM. There the alternatives vLLM 0.32's CPU platform accepts (``supported_dtypes`` in
vllm/platforms/cpu.py: bfloat16, float16, float32 on x86) are measured by
``benchmarks/vllm_dtype.py`` and the fastest taken.

:func:`choose_dtype` is a pure function of the CPU flags and an optional measured table; the table is
cached per CPU model + flags + vLLM version (:func:`table_path`), so a measurement on one machine never
decides another's dtype. The choice is recorded in the run (``runs.engine_dtype``: ``"<dtype>: <why>"``;
the fingerprint hashes the dtype only, see fingerprint.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from strix_pipeline.provision import cpu_emulation
from strix_pipeline.provision.cache import cache_dir

BFLOAT16, FLOAT16, FLOAT32 = "bfloat16", "float16", "float32"
# What vLLM 0.32's CPU platform accepts on x86 (vllm/platforms/cpu.py supported_dtypes)
SUPPORTED = (BFLOAT16, FLOAT16, FLOAT32)
# The CPU flags (/proc/cpuinfo spelling) under which bf16 is computed natively
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# Without native bf16 and without a measurement: float32 -- the path oneDNN and ATen run natively on
# any AVX2 CPU (float16 has no native arithmetic there either, only conversion: F16C)
UNMEASURED_ALTERNATIVE = FLOAT32
TABLE_VERSION = 1


@dataclass(frozen=True)
class CpuId:
    """What identifies a CPU for the choice: its model name and flags (as the engine will see them)."""

    model: str
    flags: frozenset[str]
    emulated: str | None = None  # "avx2": the flags as an AVX2-only emulation presents them

    def key(self, vllm_version: str) -> str:
        text = json.dumps(
            {
                "model": self.model,
                "flags": sorted(self.flags),
                "emulated": self.emulated,
                "vllm": vllm_version,
            },
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def as_avx2(self) -> CpuId:
        """This CPU as an AVX2-only one: every AVX-512 and AMX flag taken away (provision/cpu_emulation)."""
        return CpuId(self.model, cpu_emulation.as_kind(self.flags, cpu_emulation.AVX2), cpu_emulation.AVX2)


def parse_cpuinfo(text: str) -> CpuId:
    """The first processor's model name and flags from /proc/cpuinfo's text."""
    model, flags = "?", None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and model == "?":
            model = value.strip()
        elif name == "flags" and flags is None:
            flags = frozenset(value.split())
    if flags is None:
        raise ValueError("/proc/cpuinfo: no 'flags' line (not an x86 Linux host?)")
    return CpuId(model, flags)


def this_cpu(path: Path = Path("/proc/cpuinfo")) -> CpuId:
    """This machine's CPU as the engines will see it: an AVX2-only one under ``STRIX_EMULATE_CPU=avx2``
    (provision/cpu_emulation.py), so the dtype, its table and the engine's environment follow the switch."""
    cpu = parse_cpuinfo(path.read_text())
    return cpu.as_avx2() if cpu_emulation.emulated() == cpu_emulation.AVX2 else cpu


@dataclass(frozen=True)
class DtypeMeasurement:
    """One dtype as benchmarks/vllm_dtype.py measured it (TTFT at 5 clients decides)."""

    dtype: str
    ttft_p95_ms: float
    ttft_p50_ms: float | None = None
    decode_tok_s: float | None = None
    start_s: float | None = None


@dataclass(frozen=True)
class MeasuredTable:
    cpu: str  # the model name, for people reading the file
    vllm_version: str
    measured_at: str
    rows: tuple[DtypeMeasurement, ...]
    emulated: str | None = None


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str
    reason: str

    @property
    def recorded(self) -> str:
        """``runs.engine_dtype``: the dtype, then why (the fingerprint hashes the part before ':')."""
        return f"{self.dtype}: {self.reason}"


def native_bf16(flags: Iterable[str]) -> str | None:
    """The flag that makes bf16 native on this CPU, else None."""
    have = set(flags)
    return next((f for f in NATIVE_BF16_FLAGS if f in have), None)


def choose_dtype(flags: Iterable[str], table: MeasuredTable | None = None) -> DtypeChoice:
    """The dtype vLLM runs with on a CPU with these flags. A table measured on this CPU decides (the
    lowest TTFT p95 at 5 clients); without one: bfloat16 where bf16 is native, float32 elsewhere."""
    flags = frozenset(flags)
    rows = [r for r in (table.rows if table else ()) if r.dtype in SUPPORTED and r.ttft_p95_ms > 0]
    if rows:
        best = min(rows, key=lambda r: r.ttft_p95_ms)
        figures = ", ".join(
            f"{r.dtype} {r.ttft_p95_ms / 1000:.2f} s" for r in sorted(rows, key=lambda r: r.ttft_p95_ms)
        )
        where = f"vLLM {table.vllm_version}{', ' + table.emulated + ' emulation' if table.emulated else ''}"
        return DtypeChoice(
            best.dtype,
            f"fastest measured on this CPU ({where}, {table.measured_at}): TTFT p95 at 5 clients {figures}",
        )
    flag = native_bf16(flags)
    if flag:
        return DtypeChoice(BFLOAT16, f"the CPU computes bf16 natively ({flag}); not measured here")
    return DtypeChoice(
        UNMEASURED_ALTERNATIVE,
        "no avx512_bf16 or amx_bf16: bf16 falls back to torch linear; float32 runs natively "
        "(not measured here: benchmarks/vllm_dtype.py --save measures the alternatives)",
    )


# bytes per element of each dtype: vLLM's KV cache ("auto") is kept in the dtype it computes in
# (vLLM's spellings too; "auto" is the checkpoint's dtype, bf16 for the checkpoints this project makes)
CACHE_BYTES = {BFLOAT16: 2, FLOAT16: 2, FLOAT32: 4, "half": 2, "float": 4, "auto": 2}


def cache_bytes(dtype: str) -> int:
    """Bytes per KV cache element when vLLM computes in ``dtype`` (its kv_cache_dtype "auto")."""
    if dtype not in CACHE_BYTES:
        raise ValueError(f"--dtype {dtype!r}: not one of vLLM's CPU dtypes {list(CACHE_BYTES)}")
    return CACHE_BYTES[dtype]


def for_launch(flags: list[str], cpu: CpuId, vllm_version: str) -> tuple[list[str], DtypeChoice]:
    """The flags to add to a CPU engine's command line and the choice they carry: none when the
    configuration gives ``--dtype`` itself (it wins), else ``--dtype`` as :func:`choose_for` decides."""
    given = configured(flags)
    if given is not None:
        return [], DtypeChoice(given, "configured (--dtype in the engine's or the model's flags)")
    choice = choose_for(cpu, vllm_version)
    return ["--dtype", choice.dtype], choice


def configured(flags: list[str]) -> str | None:
    """A ``--dtype`` the configuration gives itself (it wins over the choice)."""
    for i, f in enumerate(flags):
        if f == "--dtype" and i + 1 < len(flags):
            return flags[i + 1]
        if f.startswith("--dtype="):
            return f.split("=", 1)[1]
    return None


# --------------------------------------------------------------------------- the measured table


def table_path(cpu: CpuId, vllm_version: str) -> Path:
    return cache_dir() / "vllm-dtype" / f"{cpu.key(vllm_version)}.json"


def load_table(cpu: CpuId, vllm_version: str) -> MeasuredTable | None:
    """The table measured on this CPU for this vLLM release, or None (none yet)."""
    path = table_path(cpu, vllm_version)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("version") != TABLE_VERSION:
            return None  # an older layout: measure again rather than misread it
        rows = tuple(DtypeMeasurement(**r) for r in data["rows"])
        return MeasuredTable(
            data["cpu"], data["vllm_version"], data["measured_at"], rows, data.get("emulated")
        )
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{path}: not a measured dtype table ({e}); delete it and re-run the benchmark"
        ) from e


def save_table(cpu: CpuId, table: MeasuredTable) -> Path:
    path = table_path(cpu, table.vllm_version)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"version": TABLE_VERSION, **asdict(table), "rows": [asdict(r) for r in table.rows]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return path


def choose_for(cpu: CpuId, vllm_version: str) -> DtypeChoice:
    """The choice on this CPU: its flags and the table cached for it, if any (an emulated CPU's choice
    says so: a table names its emulation itself)."""
    table = load_table(cpu, vllm_version)
    choice = choose_dtype(cpu.flags, table)
    if cpu.emulated and table is None:
        return DtypeChoice(choice.dtype, f"{choice.reason} [{cpu_emulation.label(cpu.emulated)}]")
    return choice


# --------------------------------------------------------------------------- the AVX2 emulation
# On an AVX-512 machine, the settings that make vLLM, oneDNN and ATen take their AVX2 paths (what they
# would on an AVX2-only CPU). Not emulated: the instructions the hardware runs elsewhere (glibc, numpy,
# OpenMP, other libraries' own dispatch) and the machine's cache and memory speed.
AVX2_EMULATION_ENV = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's JIT kernels (the linear layers)
    "ATEN_CPU_CAPABILITY": "avx2",  # PyTorch ATen's dispatch
}
# vLLM itself asks torch.cpu._is_avx512_supported() and friends (cpuinfo, not the env) which of its
# C++ kernel libraries to load (_C, _C_AVX512 or _C_AVX2) and which attention ISA to use: a
# sitecustomize on the engine's PYTHONPATH answers False for them in every process of the engine.
SITECUSTOMIZE = """\
# strix-pipeline AVX2 emulation (engines/vllm_dtype.py): vLLM's own CPU checks say no AVX-512/AMX
import torch.cpu as _c
for _name in ("_is_avx512_supported", "_is_avx512_vnni_supported", "_is_avx512_bf16_supported",
              "_is_amx_tile_supported", "_is_amx_fp16_supported"):
    if hasattr(_c, _name):
        setattr(_c, _name, lambda: False)
"""


def avx2_emulation_settings(directory: str) -> dict[str, str]:
    """The environment for an engine under the AVX2 emulation whose ``sitecustomize.py`` (SITECUSTOMIZE)
    is in ``directory`` (a path in the engine's file system: an image's too)."""
    return AVX2_EMULATION_ENV | {"PYTHONPATH": directory}


def avx2_emulation_env(directory: Path) -> dict[str, str]:
    """The environment for an engine under the AVX2 emulation (writes the sitecustomize there)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return avx2_emulation_settings(str(directory))
