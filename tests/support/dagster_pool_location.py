"""The code location tests/integration/postgres/test_dagster_postgres.py deploys: the project's Definitions
for $STRIX_CONFIG, with the engine replaced by tests/support/engine_standin.py in every process that loads it
(code servers, run workers, step processes).

Only the jobs and assets: the sensor and the schedule are left out because the daemon would tick them
and request runs of its own (the local llama-server build, discovered images) into the very pools the
test measures. Environment: STRIX_CONFIG, STRIX_POOL_OUT (the stand-in's files), STRIX_POOL_HOLD_S,
STRIX_POOL_RELEASE_HOST (that host's stand-in holds until ``$STRIX_POOL_OUT/release-<host>`` exists),
STRIX_POOL_RENDEZVOUS_HOST (that host's stand-in first waits until another stand-in is inside).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

import assets.benchmark as benchmark_module
from strix_dagster.definitions import load_definitions
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import RunResult
from strix_pipeline.runner import BenchmarkTarget
from tests.support.engine_standin import EngineStandIn

_OUT = Path(os.environ["STRIX_POOL_OUT"])
_HOLD_S = float(os.environ.get("STRIX_POOL_HOLD_S", "1.5"))


def _stand_in(config: StrixConfig, target: BenchmarkTarget, **kwargs: object) -> RunResult:
    release_host = os.environ.get("STRIX_POOL_RELEASE_HOST")
    stand_in = EngineStandIn(
        _OUT,
        _HOLD_S,
        rendezvous=2 if target.host == os.environ.get("STRIX_POOL_RENDEZVOUS_HOST") else 0,
        release=_OUT / f"release-{target.host}" if target.host == release_host else None,
    )
    return stand_in(config, target, **kwargs)


def _nothing_to_pull(*args: object, **kwargs: object) -> dict[str, str]:
    return {}  # the stand-in starts no container: the night's pre-pull has no image to fetch


benchmark_module.run_benchmark = _stand_in
benchmark_module.pull_before_stop = _nothing_to_pull


def _jobs_and_assets() -> dg.Definitions:
    # built inside a function: a code location module may hold only one Definitions at module scope
    project = load_definitions()
    return dg.Definitions(
        assets=project.assets,
        asset_checks=project.asset_checks,
        jobs=project.jobs,
        resources=project.resources,
    )


defs = _jobs_and_assets()
