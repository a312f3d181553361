"""Run a job of the project's code location in this process, recorded as the web UI records its runs.

``JobDefinition.execute_in_process`` stores a run with no code-location origin: the Runs page lists it,
but the Overview timeline and the job's own page select runs by their repository and show none. Here
the run is created with the origin the web server gives this project's code location (``workspace.yaml``
loads the module ``strix_dagster.definitions``, whose location is named after it), then executed in this
process with the in-process executor, as ``execute_in_process`` would.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.execution.api import execute_run
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

MODULE = "strix_dagster.definitions"
LOADER = "current_definitions"  # a function of MODULE: the definitions of $STRIX_CONFIG when called
LOCATION = MODULE  # the web server names a python_module location after its module
REPOSITORY = "__repository__"  # the name Dagster gives the repository of a Definitions object
PROJECT_ROOT = Path(__file__).resolve().parent.parent
IN_PROCESS = {"execution": {"config": {"in_process": {}}}}


@dataclass(frozen=True)
class RecordedRun:
    run_id: str
    success: bool


def job_origin(job_name: str) -> RemoteJobOrigin:
    """The origin the web server gives ``job_name`` of this project's code location."""
    target = LoadableTargetOrigin(
        executable_path=sys.executable, module_name=MODULE, working_directory=str(PROJECT_ROOT)
    )
    location = ManagedGrpcPythonEnvCodeLocationOrigin(loadable_target_origin=target, location_name=LOCATION)
    return RemoteRepositoryOrigin(location, REPOSITORY).get_job_origin(job_name)


def execute_recorded(
    job_name: str,
    instance: dg.DagsterInstance,
    *,
    partition_key: str | None = None,
    asset_selection: Sequence[dg.AssetKey] | None = None,
    tags: Mapping[str, str] | None = None,
) -> RecordedRun:
    """Run ``job_name`` (on ``partition_key``, only ``asset_selection``) here; failures are in the result.

    The job is loaded through :data:`LOADER`, so ``$STRIX_CONFIG`` must name the configuration first.
    """
    repo = ReconstructableRepository.for_module(MODULE, LOADER, working_directory=str(PROJECT_ROOT))
    recon = repo.get_reconstructable_job(job_name)
    selection = frozenset(asset_selection) if asset_selection is not None else None
    if selection is not None:
        recon = recon.get_subset(asset_selection=selection)
    job_def = recon.get_definition()
    run_tags = dict(tags or {})
    if partition_key is not None:
        run_tags.update(job_def.get_tags_for_partition_key(partition_key, selected_asset_keys=selection))
    run = instance.create_run_for_job(
        job_def=job_def,
        run_config=IN_PROCESS,
        tags=run_tags,
        asset_selection=selection,
        remote_job_origin=job_origin(job_name),
        job_code_origin=recon.get_python_origin(),
    )
    result = execute_run(recon, run, instance, raise_on_error=False)
    return RecordedRun(run.run_id, result.success)
