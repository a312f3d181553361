"""Engine specs: one module per engine, each the only place that knows its flags."""

from __future__ import annotations

from types import ModuleType

from strix_pipeline.config import EngineConfig, ModelProfile
from strix_pipeline.engines import llamacpp, sglang, vllm
from strix_pipeline.engines.base import EngineSpec, Reservation, without_flags

MODULES: dict[str, ModuleType] = {m.KIND: m for m in (llamacpp, vllm, sglang)}

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
    """
    module = MODULES[engine.kind]
    return module.build(engine, profile, model_path, port=port, bind_host=bind_host, budget_gb=budget_gb)


def default_port(kind: str) -> int:
    return MODULES[kind].DEFAULT_PORT


def comparable_flags(kind: str, flags: list[str]) -> list[str]:
    """The flags of an engine command (executable excluded) that matter for comparability."""
    return without_flags(flags, MODULES[kind].NOT_COMPARABLE_FLAGS)
