"""`strix doctor` on this machine: a split GGUF's model line needs every part beside the first, and
names the one that is absent."""

from __future__ import annotations

from pathlib import Path

from support.doctor_checks import by_name, doctor_config

from strix_pipeline.config_load import load_config
from strix_pipeline.doctor import failed, run_checks

PART = "gemma-{}-of-00003.gguf"


def test_a_split_models_line_names_the_absent_part_then_is_ok_with_all(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    for n in ("00001", "00003"):
        (models / PART.format(n)).write_bytes(b"GGUF")
    first = models / PART.format("00001")
    config = load_config(doctor_config(tmp_path / "cfg", model_path=str(first)))
    checks = run_checks(config, start_engines=False)
    model = by_name(checks, "local", "model gemma3-270m")
    assert model.state == "missing" and model in failed(checks)
    assert model.detail == f"absent: {models / PART.format('00002')}"
    assert model.fix == f"put all 3 parts in {models}, the profile's path naming the first"

    (models / PART.format("00002")).write_bytes(b"GGUF")
    model = by_name(run_checks(config, start_engines=False), "local", "model gemma3-270m")
    assert model.state == "ok" and model.detail == f"{first} (+2 parts)"


def test_a_path_naming_a_later_part_says_which_to_name(tmp_path: Path) -> None:
    later = tmp_path / PART.format("00002")
    later.write_bytes(b"GGUF")
    checks = run_checks(
        load_config(doctor_config(tmp_path / "cfg", model_path=str(later))), start_engines=False
    )
    model = by_name(checks, "local", "model gemma3-270m")
    assert model.state == "missing" and "part 2 of 3" in model.detail
    assert model.fix == f"set models.gemma3-270m.path to {tmp_path / PART.format('00001')}"
