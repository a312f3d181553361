"""The SMI cross-check in a real run: rocm-smi (here a stand-in on PATH that prints a real rocm-smi
JSON) is read at the idle baseline, after load and after stop, and stored beside the other counters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import need
from support.paths import FIXTURES
from support.pipeline_helpers import llama_available, write_config

from strix_pipeline.config_load import load_config
from strix_pipeline.runner import BenchmarkTarget, run_benchmark

FIXTURE = FIXTURES / "smi" / "rocm-smi-meminfo.json"


@pytest.mark.llama
def test_a_local_run_stores_rocm_smi_readings_at_its_three_phases(tmp_path: Path, monkeypatch) -> None:
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "rocm-smi"
    tool.write_text(f"#!/bin/sh\ncat {FIXTURE}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    config = load_config(write_config(tmp_path))
    target = BenchmarkTarget("local", "llamacpp", "gemma3-270m", "tiny", None)
    result = run_benchmark(config, target, log=lambda _: None, scenarios=["smoke"])
    assert result.run.status == "ok", result.run.failure_reason
    phases = sorted({m.phase for m in result.memory if m.source == "rocm-smi:card0"})
    assert phases == ["after_stop", "baseline", "idle"]
    used = {m.metric for m in result.memory if m.source == "rocm-smi:card0"}
    assert {"vram_used", "gtt_used", "vram_total", "gtt_total"} <= used
    # no sysfs card on this machine: nothing to compare against, so nothing is flagged
    assert "memory counters disagree" not in (result.run.failure_reason or "")
