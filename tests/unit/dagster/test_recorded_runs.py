"""The runs `strix run` (and so `make run`) starts are recorded as the web UI records its own: the job's
page and the Overview timeline select runs by their code location, so a run without one is listed on
the Runs page only. Read through the web server's GraphQL schema, on a code location loaded from the
project's workspace.yaml as `make ui` loads it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster_graphql.test.utils import WorkspaceProcessContext, execute_dagster_graphql
from support.pipeline_helpers import write_config

from strix_dagster.definitions import build_definitions
from strix_dagster.recorded import LOCATION, REPOSITORY, execute_recorded
from strix_pipeline.config_load import load_config
from strix_pipeline.warehouse import Warehouse

WORKSPACE = Path(__file__).resolve().parents[3] / "workspace.yaml"

JOB_RUNS = """
query ($job: String!, $repo: String!, $location: String!) {
  pipelineOrError(params: {pipelineName: $job, repositoryName: $repo, repositoryLocationName: $location}) {
    __typename
    ... on Pipeline { runs { runId } }
  }
  runsOrError { ... on Runs { results { runId repositoryOrigin { repositoryLocationName } } } }
}
"""


@pytest.fixture
def config_path(tmp_path, monkeypatch) -> Path:
    path = write_config(tmp_path)
    config = load_config(path)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    Warehouse.open(config.warehouse_path()).close()
    monkeypatch.setenv("STRIX_CONFIG", str(path))
    return path


def test_a_recorded_run_is_listed_under_its_job(config_path, tmp_path) -> None:
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        recorded = execute_recorded("analysis_job", instance)
        assert recorded.success
        # what execute_in_process would have stored: on the Runs page, under no job
        defs = build_definitions(load_config(config_path), str(config_path))
        bare = defs.resolve_job_def("analysis_job").execute_in_process(
            instance=instance, raise_on_error=False
        )
        with WorkspaceProcessContext(instance, WorkspaceFileTarget(paths=[str(WORKSPACE)])) as process:
            context = process.create_request_context()
            assert LOCATION in context.code_location_names  # the name the web server gives it
            answer = execute_dagster_graphql(
                context, JOB_RUNS, {"job": "analysis_job", "repo": REPOSITORY, "location": LOCATION}
            )
    assert answer.errors is None, answer.errors
    job = answer.data["pipelineOrError"]
    assert job["__typename"] == "Pipeline", job
    assert [r["runId"] for r in job["runs"]] == [recorded.run_id]
    origins = {r["runId"]: r["repositoryOrigin"] for r in answer.data["runsOrError"]["results"]}
    assert origins[recorded.run_id] == {"repositoryLocationName": LOCATION}
    assert origins[bare.run_id] is None
