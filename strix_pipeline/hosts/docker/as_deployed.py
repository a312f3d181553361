"""An engine spec as production deploys it: production's executable, flags and environment in place of
the profile's, the model file as the run's container sees it, listening where the run says. A
production that runs a binary keeps the image's own executable (the run's image is that binary's engine
build; the binary's path on the Box is not in it)."""

from __future__ import annotations

from dataclasses import replace

from strix_pipeline.engines.base import EngineSpec
from strix_pipeline.planning.production_baseline import ProductionBaseline

ALIAS_FLAGS = ("-a", "--alias")


def as_deployed(spec: EngineSpec, production: ProductionBaseline, bind_host: str) -> EngineSpec:
    """``spec`` (the run's port, model path and reservations) with production's command and environment.
    The served name is production's alias when it sets one: what its users' clients send."""
    argv = production.argv(spec.model_path, bind_host, spec.port)
    flags = argv[len(production.executable) :]
    if production.image_ref is None:
        argv = [*spec.executable, *flags]
    alias = next((flags[i + 1] for i, f in enumerate(flags[:-1]) if f in ALIAS_FLAGS), None)
    return replace(
        spec,
        command=argv,
        flags=flags,
        env=production.env_dict(),
        served_model_name=alias or spec.served_model_name,
    )
