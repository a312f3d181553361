"""`strix doctor` on a complete machine: every check passes and the real llama-server answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import need
from support.doctor_checks import by_name, doctor_config
from support.pipeline_helpers import llama_available

from strix_pipeline.config_load import load_config
from strix_pipeline.doctor import failed, run_checks

pytestmark = pytest.mark.llama


def test_a_complete_machine_passes_and_the_engine_answers(tmp_path: Path) -> None:
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    checks = run_checks(load_config(doctor_config(tmp_path)))
    assert failed(checks) == [], [(c.host, c.name, c.detail) for c in failed(checks)]
    answers = by_name(checks, "local", "llama-server answers")
    assert answers.ok and answers.detail.startswith("1 token")
