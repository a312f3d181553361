"""A Box run of production's own image and model file runs as production deploys it.

When the run's image is production's (same digest) and its model profile's file is production's, the
run takes production's flags and environment (planning/production_baseline.py), read read-only at its
start: the decision's baseline is then what production serves, not the pipeline's default flags. A
production that runs a binary is run as the image of its llama.cpp build and backend (the matching engine
build, planning/production_target.py) with its flags, environment and model file. A
configured ``[decision] baseline_image`` stays an explicit override (the run keeps the profile's
flags), as does a production that cannot be read (said in the run's log)."""

from __future__ import annotations

from typing import Any

from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.box.production_read import read_production
from strix_pipeline.hosts.docker.ssh import client_transport
from strix_pipeline.planning.production_baseline import (
    ProductionBaseline,
    ProductionReadError,
    derive_baseline,
)
from strix_pipeline.planning.production_target import is_matching_build
from strix_pipeline.planning.targets import BenchmarkTarget
from strix_pipeline.runner.target import Log


def production_for(
    config: StrixConfig, target: BenchmarkTarget, client: Any, log: Log
) -> ProductionBaseline | None:
    """Production as deployed when ``target`` is a run of its image and model file, else None."""
    if target.production is not None:
        return target.production
    host = config.docker_config(target.host)
    production, image = host.production, target.image
    if (
        production is None
        or not (production.container or production.unit)
        or image is None
        or target.engine != config.decision.baseline_engine
        or config.decision.baseline_image  # the configured override
    ):
        return None
    try:
        transport = client_transport(client)
        base = derive_baseline(read_production(production, client, transport.target if transport else None))
    except (ProductionReadError, OSError) as e:
        log(f"production not read, the profile's flags are used: {e}")
        return None
    except Exception as e:  # noqa: BLE001 - docker-py's NotFound and API errors alike
        log(f"production not read, the profile's flags are used: {type(e).__name__}: {e}")
        return None
    same_image = bool(base.image_ref) and base.image_ref.rsplit("@", 1)[-1] == image.digest
    same_build = base.image_ref is None and is_matching_build(image, base)  # a binary's engine build
    if (same_image or same_build) and base.model_on_host == config.models[target.model].path:
        log(f"{base.source}: production's flags, environment and model file; changed: "
            + (", ".join(c.what for c in base.changes) or "nothing"))  # fmt: skip
        return base
    if base.image_ref is None and not same_build:
        build = base.build or "(its --version names no build)"
        log(f"production runs a binary of llama.cpp {build} ({base.backend}); this run's image is not that "
            "engine build: the profile's flags are used")  # fmt: skip
    return None
