"""The vLLM env install: an unfinished or other-recipe install is never used, a failed one names its step
and its log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strix_pipeline.provision import vllm_env


def test_unfinished_install_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIX_CACHE_DIR", str(tmp_path))
    root = vllm_env.env_root()
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").write_text("")
    assert vllm_env.find_env() is None  # no completion marker
    marker = {"version": vllm_env.VLLM_CPU_VERSION, "recipe": vllm_env.RECIPE + 1}
    (root / vllm_env.MARKER).write_text(json.dumps(marker))
    assert vllm_env.find_env() is None  # made by another recipe
    (root / vllm_env.MARKER).write_text(json.dumps(marker | {"recipe": vllm_env.RECIPE}))
    found = vllm_env.find_env()
    assert found is not None and found.engine_build == f"vllm-cpu {vllm_env.VLLM_CPU_VERSION}"
    assert vllm_env.find_env("0.0.1") is None  # a version bump is another env


def test_failed_install_names_the_step_and_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIX_CACHE_DIR", str(tmp_path))
    lines: list[str] = []
    with pytest.raises(vllm_env.InstallError) as info:
        vllm_env.install("0.0.1", python="/bin/false", progress=lines.append)
    msg = str(info.value)
    assert "create venv failed (exit 1)" in msg and str(vllm_env.env_root("0.0.1") / "install.log") in msg
    assert lines and vllm_env.find_env("0.0.1") is None
