"""Engine specs: one module per engine, each the only place that knows its flags.

An engine module declares what is its own and nothing else:

- ``KIND``, ``DEFAULT_PORT``, ``DEFAULT_EXECUTABLE``;
- ``NOT_COMPARABLE_FLAGS``: the flags that say where the model is and where the engine listens;
- ``READY_PATHS``, ``METRICS_PREFIX``, ``VERSION_PATH`` / ``VERSION_KEY``;
- ``flags(profile, model_path, extras)``: the flags the profile decides (``extras``, the config's own
  flags that follow them, lets a module leave out a default the config names itself);
- ``reservations(flags, profile, budget_gb)``: the memory the flags claim up front.

:func:`build_spec` is the one place that puts them together into an :class:`EngineSpec`.
"""

from __future__ import annotations

from types import ModuleType

from strix_pipeline.config import EngineConfig, ModelProfile
from strix_pipeline.engines import llamacpp, sglang, vllm
from strix_pipeline.engines.base import EngineSpec, Reservation, extra_flags, served_name, without_flags

MODULES: dict[str, ModuleType] = {m.KIND: m for m in (llamacpp, vllm, sglang)}
METRICS_PATH = "/metrics"  # every engine's Prometheus endpoint

__all__ = ["EngineSpec", "Reservation", "build_spec", "comparable_flags", "default_port"]


def build_spec(
    engine: EngineConfig,
    profile: ModelProfile,
    model_path: str,
    *,
    port: int | None = None,
    bind_host: str = "0.0.0.0",
    budget_gb: float | None = None,
) -> EngineSpec:
    """The argv, port, readiness and metrics of ``engine`` serving ``profile`` from ``model_path``.

    ``model_path`` is where the engine sees the model (inside the container on a Docker host).
    ``budget_gb`` (the host's memory budget) turns pool fractions into reserved GB for the guard.
    The argv is the engine's executable, the profile's flags, ``--host``/``--port``, then the config's
    extra flags (engine-wide, then the profile's): the later one wins on repeat.
    """
    module = MODULES[engine.kind]
    port = port or engine.port or module.DEFAULT_PORT
    extras = extra_flags(module.KIND, engine, profile)
    flags = [*module.flags(profile, model_path, extras), "--host", bind_host, "--port", str(port), *extras]
    return EngineSpec(
        kind=module.KIND,
        command=list(engine.executable or module.DEFAULT_EXECUTABLE) + flags,
        port=port,
        served_model_name=served_name(profile),
        model_path=model_path,
        ready_paths=module.READY_PATHS,
        metrics_path=METRICS_PATH,
        metrics_prefix=module.METRICS_PREFIX,
        version_path=module.VERSION_PATH,
        version_key=module.VERSION_KEY,
        flags=flags,
        reservations=module.reservations(flags, profile, budget_gb),
    )


def default_port(kind: str) -> int:
    return MODULES[kind].DEFAULT_PORT


def comparable_flags(kind: str, flags: list[str]) -> list[str]:
    """The flags of an engine command (executable excluded) that matter for comparability."""
    return without_flags(flags, MODULES[kind].NOT_COMPARABLE_FLAGS)
