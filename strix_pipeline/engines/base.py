"""What a launcher needs to know about an engine, built from a model profile and the engine's config.

Only the engine's own module knows its flags; launchers (Docker on the Box, a local process) and
guards read the resulting :class:`EngineSpec` and nothing else.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from packaging.version import InvalidVersion, Version

from strix_pipeline.config import EngineConfig, ModelProfile

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
            self.model, model_path,
            "--served-model-name", served_name(profile),
            self.context_length, str(profile.context_length),
            self.memory_fraction, str(profile.memory_fraction),
            self.parallel, str(profile.parallel),
        ]  # fmt: skip


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


def extra_flags(kind: str, engine: EngineConfig, profile: ModelProfile) -> list[str]:
    """Engine-wide flags first, then the profile's for this engine kind: the later one wins on repeat."""
    return list(engine.extra_flags) + list(profile.extra_flags.get(kind, []))


def flag_value(flags: list[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in an argv (the last one wins, as argparse does)."""
    value = None
    for i, f in enumerate(flags):
        if f == name and i + 1 < len(flags):
            value = flags[i + 1]
        elif f.startswith(name + "="):
            value = f.split("=", 1)[1]
    return value


def flag_gb(flags: list[str], name: str) -> float | None:
    raw = flag_value(flags, name)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


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


def pool_reservations(
    flags: list[str],
    profile: ModelProfile,
    budget_gb: float | None,
    fraction_flag: str,
    host_ram_flags: tuple[str, ...],
) -> list[Reservation]:
    """What an engine with a pre-allocated pool claims: the pool (its fraction flag x the host's budget;
    on unified memory the device total is the shared pool), plus flags that lock host RAM beside it
    (the same pool on unified memory -- the HiCache lesson), plus the profile's own reserve."""
    out = common_reservations(profile)
    fraction = float(flag_value(flags, fraction_flag) or profile.memory_fraction)
    if budget_gb is not None:
        out.append(
            Reservation(f"{fraction_flag} {fraction:g} x budget {budget_gb:g} GB", fraction * budget_gb)
        )
    for name in host_ram_flags:
        gb = flag_gb(flags, name)
        if gb:
            out.append(Reservation(f"{name} {gb:g}", gb))
    return out
