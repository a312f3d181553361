"""What a launcher needs to know about an engine, built from a model profile and the engine's config.

Only the engine's own module knows its flags; launchers (Docker on the Box, a local process) and
guards read the resulting :class:`EngineSpec` and nothing else.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from packaging.version import InvalidVersion, Version

from strix_pipeline.config import EngineConfig, ImageSource, ModelProfile
from strix_pipeline.units import GB, GIB, gib_text

# Where a host's models directory appears inside an engine container.
CONTAINER_MODELS_DIR = "/models"


@dataclass(frozen=True)
class ReleaseChange:
    """A difference of an engine's command line between its releases, declared once in the engine's
    module: releases before ``since`` take ``rewrite(flags)`` instead of today's flags."""

    since: str  # the first package version with today's spelling ("0.10.2"; llama.cpp: "9000.0.0")
    what: str  # what changed, in words a user reads in the run's log
    rewrite: Callable[[list[str]], list[str]]


def flags_for_release(
    changes: tuple[ReleaseChange, ...], version: str | None, flags: list[str]
) -> tuple[list[str], list[str]]:
    """The flags release ``version`` takes, and what was changed for it (newest change first, so each
    rewrite sees the spelling of the release after it). An unknown or unparsable version: today's."""
    try:
        have = Version(version) if version else None
    except InvalidVersion:
        have = None
    notes: list[str] = []
    if have is None:
        return list(flags), notes
    out = list(flags)
    for change in sorted(changes, key=lambda c: Version(c.since), reverse=True):
        if have < Version(change.since):
            rewritten = change.rewrite(out)
            if rewritten != out:
                notes.append(f"before {change.since}: {change.what}")
            out = rewritten
    return out, notes


@dataclass(frozen=True)
class Reservation:
    """Memory a configuration claims up front, in GB, with where the number came from."""

    what: str
    gb: float


class OverBudget(ValueError):
    """Reservations above the host's memory budget: a plain error, which the run's guard turns into
    ``failed_guard`` and a config load into a refusal of the file."""


def check_budget(reservations: list[Reservation], budget_gb: float | None, *, what: str) -> None:
    """The budget rule, once: what a configuration reserves up front must fit the host's budget.

    On unified memory the engine's pool and host RAM are one pool: SGLang's HiCache on top of its pool
    has OOM-looped a box. No budget configured means nothing to check against.
    """
    if budget_gb is None:
        return
    total = sum(r.gb for r in reservations)
    if total > budget_gb:
        parts = " + ".join(f"{r.what} = {r.gb:.1f} GB" for r in reservations)
        raise OverBudget(
            f"{what} reserves {total:.1f} GB ({parts}), over the host's memory_budget_gb {budget_gb:g} GB "
            f"by {total - budget_gb:.1f} GB"
        )


@dataclass(frozen=True)
class EngineSpec:
    kind: str  # "llamacpp" | "vllm" | "sglang"
    command: list[str]  # full argv: executable prefix + flags
    port: int
    served_model_name: str
    model_path: str  # as the engine sees it (inside the container, or a local file)
    ready_paths: tuple[str, ...]  # answered 200 in this order means "serves"
    metrics_path: str
    metrics_prefix: str  # "llamacpp:", "vllm:", "sglang:"
    version_path: str | None  # endpoint giving the engine build, when it has one
    version_key: str | None  # the JSON key holding it there
    flags: list[str] = field(default_factory=list)  # the flags that matter for comparability
    reservations: list[Reservation] = field(default_factory=list)
    # a pool engine's (vLLM, SGLang) fraction of the device and the flag that sets it; None: no pool
    pool_fraction: float | None = None
    pool_flag: str | None = None
    # the environment the engine starts with besides its image's own ENV (engine_env)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def executable(self) -> list[str]:
        return self.command[: len(self.command) - len(self.flags)]

    def command_line(self) -> str:
        return shlex.join(self.command)


@dataclass(frozen=True)
class PoolFlags:
    """The flags under which an engine with a pre-allocated pool (vLLM, SGLang) takes a profile's
    settings; both name the served model ``--served-model-name``."""

    model: str
    context_length: str  # per request
    memory_fraction: str  # of the device total: the pool
    parallel: str  # sequences served at once

    def argv(self, profile: ModelProfile, model_path: str) -> list[str]:
        return [
            self.model,
            model_path,
            "--served-model-name",
            served_name(profile),
            self.context_length,
            str(profile.context_length),
            self.memory_fraction,
            str(profile.memory_fraction),
            self.parallel,
            str(profile.parallel),
        ]


def without_flags(flags: list[str], names: frozenset[str]) -> list[str]:
    """``flags`` minus every ``--name V`` / ``--name=V`` whose name is in ``names``."""
    out: list[str] = []
    skip = False
    for arg in flags:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif arg.split("=", 1)[0] not in names:
            out.append(arg)
    return out


def served_name(profile: ModelProfile) -> str:
    return profile.served_name or profile.model


def extra_flags(
    kind: str, engine: EngineConfig, profile: ModelProfile, source: ImageSource | None = None
) -> list[str]:
    """Engine-wide flags first, then the image source's (what its images need, e.g. an attention
    backend), then the profile's for this engine kind: the later one wins on repeat."""
    own = list(source.extra_flags) if source is not None else []
    return list(engine.extra_flags) + own + list(profile.extra_flags.get(kind, []))


def engine_env(engine: EngineConfig, source: ImageSource | None = None) -> dict[str, str]:
    """The environment the engine starts with besides its image's own: the engine's, then the image
    source's (it wins on a repeated name: it knows its images)."""
    return dict(engine.env) | (dict(source.env) if source is not None else {})


def flag_value(flags: list[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in an argv (the last one wins, as argparse does)."""
    value = None
    for i, f in enumerate(flags):
        if f == name and i + 1 < len(flags):
            value = flags[i + 1]
        elif f.startswith(name + "="):
            value = f.split("=", 1)[1]
    return value


def flag_gb(flags: list[str], name: str, unit: int = GB) -> float | None:
    """A size flag's value in GB (10^9 bytes, the budget's unit), read in the flag's own ``unit``:
    vLLM's ``--swap-space`` and ``--cpu-offload-gb`` are GiB (its arg_utils: "in GiB"), SGLang's
    ``--hicache-size`` GB. None when absent or not a number."""
    raw = flag_value(flags, name)
    if raw is None:
        return None
    try:
        return float(raw) * unit / GB
    except ValueError:
        return None


@dataclass(frozen=True)
class DeviceMemory:
    """The device a pool fraction is a fraction of, as the host reports it (memory.HostMemoryFacts)."""

    total_gb: float | None = None  # HIP's device total (the KFD topology), GB; None: not read
    cpu: bool = False  # no GPU device at all: vLLM's CPU backend, which reserves its KV bytes
    env: dict[str, str] = field(default_factory=dict)  # the engine's environment (VLLM_CPU_KVCACHE_SPACE)


def container_model_path(path: str, models_dir: str | None) -> str:
    """Map a profile's model path to where the engine container sees it.

    A relative path is relative to the host's models directory; an absolute path under that
    directory is rewritten below /models; any other absolute path is mounted on its own at
    /models/<name> (see DockerLauncher's mounts), so the mapping is the same in both places.
    """
    p = PurePosixPath(path)
    if not p.is_absolute():
        return str(PurePosixPath(CONTAINER_MODELS_DIR) / p)
    if models_dir:
        try:
            return str(PurePosixPath(CONTAINER_MODELS_DIR) / p.relative_to(PurePosixPath(models_dir)))
        except ValueError:
            pass
    return str(PurePosixPath(CONTAINER_MODELS_DIR) / p.name)


def common_reservations(profile: ModelProfile) -> list[Reservation]:
    if profile.reserve_gb > 0:
        return [Reservation("profile reserve_gb", profile.reserve_gb)]
    return []


def pool_fraction(flags: list[str], profile: ModelProfile, fraction_flag: str) -> float:
    """The pool's fraction of the device: the flag's value when the argv has it, else the profile's."""
    return float(flag_value(flags, fraction_flag) or profile.memory_fraction)


def pool_reservations(
    flags: list[str],
    profile: ModelProfile,
    budget_gb: float | None,
    fraction_flag: str,
    host_ram_flags: tuple[tuple[str, int], ...],
    device: DeviceMemory | None = None,
) -> list[Reservation]:
    """What an engine with a pre-allocated pool claims: the pool -- its fraction flag x the device
    total as HIP reports it when the host's was read (what vLLM and SGLang take the fraction of), else
    x the host's budget --, plus flags that lock host RAM beside it, each read in its own unit (the
    same pool on unified memory -- the HiCache lesson), plus the profile's own reserve."""
    out = common_reservations(profile)
    fraction = pool_fraction(flags, profile, fraction_flag)
    if device is not None and device.total_gb:
        out.append(
            Reservation(
                f"{fraction_flag} {fraction:g} x device total {device.total_gb:.1f} GB (HIP)",
                fraction * device.total_gb,
            )
        )
    elif budget_gb is not None:
        out.append(
            Reservation(f"{fraction_flag} {fraction:g} x budget {budget_gb:g} GB", fraction * budget_gb)
        )
    out += ram_flag_reservations(flags, host_ram_flags)
    return out


def ram_flag_reservations(flags: list[str], host_ram_flags: tuple[tuple[str, int], ...]) -> list[Reservation]:
    out = []
    for name, unit in host_ram_flags:
        gb = flag_gb(flags, name, unit)
        if gb:
            shown = flag_value(flags, name)
            out.append(Reservation(f"{name} {shown}" + (" GiB" if unit == GIB else ""), gb))
    return out


def pool_fit_problem(
    fraction: float,
    device_total_bytes: int | None,
    weights_bytes: int | None,
    *,
    fraction_flag: str,
    what: str,
) -> str | None:
    """Why a pool engine cannot load the model, or None: the weights alone must fit the pool that
    ``fraction`` of the device total (as HIP sees it) makes, the KV cache and activations come on top."""
    if not device_total_bytes or not weights_bytes:
        return None
    pool = fraction * device_total_bytes
    if weights_bytes <= pool:
        return None
    return (
        f"{what} cannot load: its weights {gib_text(weights_bytes, 1)} exceed the pool {fraction_flag} "
        f"{fraction:g} x device total {gib_text(device_total_bytes, 1)} (as HIP sees it, KFD topology) = "
        f"{gib_text(pool, 1)}, by {gib_text(weights_bytes - pool, 1)}: raise the TTM limit "
        f"(ttm/amdttm pages_limit) or the fraction, or use a smaller quantization"
    )


# --- the architecture gate: what GPU targets an image was compiled for, read without a GPU ----------
_GFX = re.compile(r"\bgfx[0-9a-f]{3,5}\b")


@dataclass(frozen=True)
class CompiledTargets:
    """What an image's arch-list command printed: per component (``torch``, a library's path), the GPU
    targets found there. No component at all: nothing GPU-specific was compiled in (a Vulkan build).
    ``unreadable``: components whose targets could not be read (a compressed offload bundle the image
    cannot decompress, engines/offload_bundles.py), with why -- refused, never taken for a pass."""

    components: dict[str, tuple[str, ...]]
    unreadable: dict[str, str] = field(default_factory=dict)

    def missing(self, target: str) -> dict[str, tuple[str, ...]]:
        """The components that were not built for ``target`` (a component listing none is one)."""
        return {name: found for name, found in self.components.items() if target not in found}

    def describe(self) -> str:
        if not self.components and not self.unreadable:
            return "none listed (no GPU-specific code)"
        parts = [f"{name}: {' '.join(t) or 'none'}" for name, t in self.components.items()]
        parts += [f"{name}: unreadable ({why})" for name, why in self.unreadable.items()]
        return "; ".join(parts)


UNREADABLE = "unreadable: "


def parse_compiled_targets(output: str) -> CompiledTargets:
    """Each non-empty line of an arch-list command is ``component: targets...`` (the part before the
    first ``: `` names the component; without one the line is its own name); the targets are every
    ``gfx…`` token on it, in order, once each. ``component: unreadable: why`` is a component whose
    targets could not be read."""
    components: dict[str, tuple[str, ...]] = {}
    unreadable: dict[str, str] = {}
    for line in output.splitlines():
        line = line.strip()
        if not line:
            continue
        name, sep, rest = line.partition(": ")
        if sep and rest.startswith(UNREADABLE):
            unreadable[name] = rest.removeprefix(UNREADABLE)
            continue
        text = rest if sep else line
        key = name if sep else line[:60]
        components[key] = tuple(dict.fromkeys(components.get(key, ()) + tuple(_GFX.findall(text))))
    return CompiledTargets(components, unreadable)


# PyTorch's compiled targets without a GPU: torch.cuda.get_arch_list() answers [] when no device is
# visible, so the build's own flags are read (torch/csrc/cuda/Module.cpp THCPModule_getArchFlags: the
# arch list the build was compiled with, "gfx90a;gfx942;…" on ROCm). A ROCm build that does not carry
# them prints nothing for torch (unlisted: not refused); a build for no GPU at all prints "none".
TORCH_ARCH_SNIPPET = (
    "import torch\n"
    "f = getattr(torch._C, '_cuda_getArchFlags', None)\n"
    "flags = f() if f else None\n"
    "if flags or not getattr(torch.version, 'hip', None):\n"
    "    print('torch:', flags or 'none')\n"
)
