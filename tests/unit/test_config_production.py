"""Production as the owner describes it: a production by commands names who runs it (its unit or its
toolbox), refused at load otherwise with the field to set; holders the owner knows about, by name."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from support.paths import REPO

from strix_pipeline.config import ProductionEngine
from strix_pipeline.config_load import load_config

COMMANDS = {
    "stop_command": ["sudo", "-n", "systemctl", "stop", "llama-server.service"],
    "start_command": ["sudo", "-n", "systemctl", "start", "llama-server.service"],
    "health_url": "http://127.0.0.1:8080/health",
}


def test_a_production_by_commands_without_unit_is_refused_naming_the_field():
    with pytest.raises(ValidationError) as e:
        ProductionEngine.model_validate(COMMANDS)
    said = str(e.value)
    assert "needs `unit`" in said and 'unit = "llama-server.service"' in said and "podman_container" in said


@pytest.mark.parametrize("who", [{"unit": "llama-server.service"}, {"podman_container": "llama-rocm-7.2"}])
def test_a_production_by_commands_that_names_who_runs_it_loads(who):
    assert ProductionEngine.model_validate(COMMANDS | who)


def test_the_example_documents_allowed_holders_and_they_load():
    text = (REPO / "config" / "strix-halo.example.toml").read_text()
    assert "allowed_device_holders" in text and "podman_container" in text
    production = load_config(REPO / "config" / "strix-halo.example.toml").hosts["strix-halo"].production
    assert production is not None and production.allowed_device_holders == []  # none unless the owner says
    allowed = ProductionEngine.model_validate(
        {"container": "llama-prod", "health_url": "http://x/health", "allowed_device_holders": ["amdgpu_top"]}
    )
    assert allowed.allowed_device_holders == ["amdgpu_top"]
    with pytest.raises(ValidationError):
        ProductionEngine.model_validate(
            {"container": "llama-prod", "health_url": "http://x/health", "allowed_device_holders": [""]}
        )
