"""Engine specs: one module per engine, each the only place that knows its flags.

An engine module declares what is its own and nothing else:

- ``KIND``, ``DEFAULT_PORT``, ``DEFAULT_EXECUTABLE``, ``COMPILE_CACHE_DIR`` (kept across starts, or None);
- ``NOT_COMPARABLE_FLAGS``: the flags that say where the model is and where the engine listens;
- ``READY_PATHS``, ``METRICS_PREFIX``, ``VERSION_PATH`` / ``VERSION_KEY``;
- ``flags(profile, model_path, extras)``: the flags the profile decides (``extras``, the config's own
  flags that follow them, lets a module leave out a default the config names itself);
- ``reservations(flags, profile, budget_gb, device)``: the memory the flags claim up front;
- ``ARCH_LIST_COMMAND``: an argv that prints the GPU targets an image was compiled for, without a GPU
  (``component: gfx…`` lines, engines.base.parse_compiled_targets): the architecture gate's default.

:func:`build_spec` is the one place that puts them together into an :class:`EngineSpec`.
"""

from __future__ import annotations

from types import ModuleType

from strix_pipeline.config import EngineConfig, ImageSource, ModelProfile
from strix_pipeline.engines import llamacpp, sglang, vllm
from strix_pipeline.engines.base import (
    DeviceMemory,
    EngineSpec,
    PoolFlags,
    Reservation,
    engine_env,
    extra_flags,
    pool_fraction,
    served_name,
    without_flags,
)

MODULES: dict[str, ModuleType] = {m.KIND: m for m in (llamacpp, vllm, sglang)}
METRICS_PATH = "/metrics"  # every engine's Prometheus endpoint

__all__ = [
    "EngineSpec",
    "Reservation",
    "arch_list_command",
    "build_spec",
    "comparable_flags",
    "compile_cache_dir",
    "default_port",
    "executable_for",
    "image_source",
]


def build_spec(
    engine: EngineConfig,
    profile: ModelProfile,
    model_path: str,
    *,
    port: int | None = None,
    bind_host: str = "0.0.0.0",
    budget_gb: float | None = None,
    source: ImageSource | None = None,
    device: DeviceMemory | None = None,
) -> EngineSpec:
    """The argv, port, readiness and metrics of ``engine`` serving ``profile`` from ``model_path``.

    ``model_path`` is where the engine sees the model (inside the container on a Docker host).
    ``budget_gb`` (the host's memory budget) turns pool fractions into reserved GB for the guard, or
    ``device`` (the device total HIP reports on the host, read by its probe) when it is known.
    The argv is the engine's executable, the profile's flags, ``--host``/``--port``, then the config's
    extra flags (engine-wide, the image source's, then the profile's): the later one wins on repeat.
    ``source``: the image source the engine's image comes from, whose ``executable`` wins
    (:func:`executable_for`) and whose ``env`` and ``extra_flags`` join the engine's.
    """
    module = MODULES[engine.kind]
    port = port or engine.port or module.DEFAULT_PORT
    extras = extra_flags(module.KIND, engine, profile, source)
    flags = [*module.flags(profile, model_path, extras), "--host", bind_host, "--port", str(port), *extras]
    pool: PoolFlags | None = getattr(module, "PROFILE_FLAGS", None)
    return EngineSpec(
        kind=module.KIND,
        command=executable_for(engine, source) + flags,
        port=port,
        served_model_name=served_name(profile),
        model_path=model_path,
        ready_paths=module.READY_PATHS,
        metrics_path=METRICS_PATH,
        metrics_prefix=module.METRICS_PREFIX,
        version_path=module.VERSION_PATH,
        version_key=module.VERSION_KEY,
        flags=flags,
        reservations=module.reservations(flags, profile, budget_gb, device),
        pool_fraction=pool_fraction(flags, profile, pool.memory_fraction) if pool else None,
        pool_flag=pool.memory_fraction if pool else None,
        env=engine_env(engine, source),
    )


def compile_cache_dir(kind: str) -> str | None:
    """Where the engine keeps what it compiles at start, in its container (None: nothing to keep)."""
    return MODULES[kind].COMPILE_CACHE_DIR


def default_port(kind: str) -> int:
    return MODULES[kind].DEFAULT_PORT


def comparable_flags(kind: str, flags: list[str]) -> list[str]:
    """The flags of an engine command (executable excluded) that matter for comparability."""
    return without_flags(flags, MODULES[kind].NOT_COMPARABLE_FLAGS)


def executable_for(engine: EngineConfig, source: ImageSource | None = None) -> list[str]:
    """The argv prefix that starts the engine: the image source's, else the engine's, else the module's
    default (the one place this order is decided)."""
    if source is not None and source.executable:
        return list(source.executable)
    return list(engine.executable or MODULES[engine.kind].DEFAULT_EXECUTABLE)


def image_source(engine: EngineConfig, registry: str, repository: str) -> ImageSource | None:
    """The engine's image source a (registry, repository) comes from; None when none is configured."""
    for source in engine.images:
        if source.registry == registry and source.repository == repository:
            return source
    return None


def arch_list_command(engine: EngineConfig, source: ImageSource | None = None) -> list[str]:
    """The argv listing an image's compiled GPU targets: the source's own, else the engine module's
    (``[]``: the gate is skipped for this source, e.g. a Vulkan build)."""
    if source is not None and source.arch_list_command is not None:
        return list(source.arch_list_command)
    return list(MODULES[engine.kind].ARCH_LIST_COMMAND)


def unified_memory_problems(unified_memory: bool, kind: str, flags: list[str]) -> list[str]:
    """The settings an engine must never use on a host (none unless it is a unified-memory host): the
    one rule the configuration's load and a Box run's guard before production stops both apply."""
    if not unified_memory or kind != sglang.KIND:
        return []
    return sglang.unified_memory_problems(flags)
