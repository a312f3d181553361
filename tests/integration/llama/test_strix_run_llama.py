"""A run that measured is a success: `strix run` against the real llama-server exits 0 and its asset
checks pass (the run that measured nothing is in tests/unit/hosts/test_engine_crash.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import need
from support.pipeline_helpers import llama_available, write_config
from support.strix_run import run_checks_in, strix_run

from strix_pipeline.hosts.local.llama_server import LLAMA_SERVER_ENV

pytestmark = [pytest.mark.llama, pytest.mark.slow]


def test_strix_run_succeeds_when_it_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    monkeypatch.delenv(LLAMA_SERVER_ENV, raising=False)
    rc, out = strix_run(write_config(tmp_path), tmp_path, monkeypatch, capsys)
    assert rc == 0, out
    assert "measured nothing" not in out
    checks = run_checks_in(tmp_path / "dagster-home")
    assert checks["engine_served"].passed and checks["benchmark_complete"].passed
