"""C1 means "starts with no override": HSA_OVERRIDE_GFX_VERSION anywhere in what a
run started with -- its launch command, the environment its configuration gave it (the engine's and
its image source's), or its image's own ENV -- fails C1 with that reason, whatever else the run did."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from support.decision_seed import SEPT, judge_runs, make_config, seeded, september_runs

from strix_pipeline.analysis.decision import evaluate

NOW = SEPT + timedelta(days=1)
IMAGE_ENV = ["PATH=/usr/local/bin:/usr/bin", "HSA_OVERRIDE_GFX_VERSION=11.0.0", "ROCM_PATH=/opt/rocm"]


def c1(runs):
    return {c.criterion: c for c in judge_runs(runs, make_config(), NOW).criteria}["C1"]


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("image_env", json.dumps(IMAGE_ENV), "its image's own ENV"),
        (
            "engine_env",
            json.dumps({"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}),
            "the environment its configuration gave it",
        ),
        (
            "launch_command",
            "docker run -e HSA_OVERRIDE_GFX_VERSION=11.0.0 vllm/vllm-openai-rocm",
            "its launch command",
        ),
    ],
)
def test_an_override_anywhere_a_run_starts_with_fails_c1_saying_where(field, value, where):
    runs = september_runs()
    assert c1(runs).status == "pass"  # the same run without it: it reached ready
    setattr(runs[0].run, field, value)
    c = c1(runs)
    assert c.status == "fail", c.reason
    assert f"with HSA_OVERRIDE_GFX_VERSION in {where} (run vllm-qwen)" in c.reason, c.reason
    assert c.evidence_run_ids == ["vllm-qwen"]


def test_an_image_without_the_override_in_its_env_starts_as_before():
    runs = september_runs()
    runs[0].run.image_env = json.dumps(["PATH=/usr/bin", "HSA_XNACK=0", "ROCBLAS_USE_HIPBLASLT=1"])
    runs[0].run.engine_env = json.dumps({"ROCBLAS_USE_HIPBLASLT": "1"})
    assert c1(runs).status == "pass"


def test_the_override_in_an_images_env_fails_c1_through_the_warehouse(tmp_path):
    runs = september_runs()
    runs[0].run.image_env = json.dumps(IMAGE_ENV)
    c = {
        c.criterion: c for c in evaluate(seeded(tmp_path / "w.duckdb", runs), make_config(), now=NOW).criteria
    }
    assert c["C1"].status == "fail" and "in its image's own ENV" in c["C1"].reason, c["C1"].reason
    # nor does that run count as serving (C2 reads the same start)
    assert c["C2"].status == "fail"
