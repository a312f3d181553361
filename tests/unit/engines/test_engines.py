"""Engine specs: each engine's argv, port, readiness and reservations come from one module."""

from __future__ import annotations

import pytest
from support.engines import reserved_gb

from strix_pipeline.config import EngineConfig, ModelProfile
from strix_pipeline.engines import build_spec, default_port
from strix_pipeline.engines.base import container_model_path, flag_value


def profile(**kw) -> ModelProfile:
    base = dict(
        model="Qwen3-30B-A3B",
        family="qwen3-30b-a3b",
        quantization="Q4_K_M",
        path="qwen3/q4.gguf",
        context_length=8192,
        parallel=4,
        memory_fraction=0.5,
    )
    base.update(kw)
    return ModelProfile(**base)


def test_llamacpp_command_has_the_box_flags():
    spec = build_spec(EngineConfig(kind="llamacpp"), profile(), "/models/qwen3/q4.gguf")
    argv = spec.command
    assert argv[0] == "llama-server"
    assert flag_value(argv, "-m") == "/models/qwen3/q4.gguf"
    # per-request context times slots: -c is the total across slots
    assert flag_value(argv, "-c") == str(8192 * 4)
    assert flag_value(argv, "-np") == "4"
    assert flag_value(argv, "-ngl") == "999"
    assert flag_value(argv, "-fa") == "on"
    assert "--no-mmap" in argv and "--metrics" in argv
    assert flag_value(argv, "--port") == "18080" and spec.port == 18080  # not production's 8080
    assert spec.served_model_name == "Qwen3-30B-A3B" and flag_value(argv, "--alias") == "Qwen3-30B-A3B"
    assert spec.ready_paths == ("/health", "/v1/models")
    assert spec.metrics_prefix == "llamacpp:"
    assert spec.executable == ["llama-server"]
    assert spec.reservations == []


def test_vllm_command_and_pool_reservation():
    engine = EngineConfig(kind="vllm", extra_flags=["--enforce-eager"])
    p = profile(served_name="qwen", extra_flags={"vllm": ["--swap-space", "4"], "sglang": ["--nope"]})
    spec = build_spec(engine, p, "/models/qwen3", budget_gb=100)
    argv = spec.command
    assert argv[:4] == ["vllm", "serve", "--model", "/models/qwen3"]
    assert flag_value(argv, "--max-model-len") == "8192"
    assert flag_value(argv, "--gpu-memory-utilization") == "0.5"
    assert flag_value(argv, "--max-num-seqs") == "4"
    assert flag_value(argv, "--served-model-name") == "qwen"
    assert spec.port == 18000 == default_port("vllm")
    assert "--enforce-eager" in argv and "--nope" not in argv  # only this engine's profile flags
    assert spec.metrics_prefix == "vllm:"
    # --swap-space is GiB in vLLM (arg_utils.py), the budget GB: 4 GiB is 4.29 GB
    assert reserved_gb(spec) == pytest.approx(0.5 * 100 + 4 * 2**30 / 1e9)


def test_sglang_command_and_hicache_reservation():
    p = profile(memory_fraction=0.8, reserve_gb=2, extra_flags={"sglang": ["--hicache-size=30"]})
    spec = build_spec(EngineConfig(kind="sglang", port=30000), p, "/models/qwen3", budget_gb=110)
    argv = spec.command
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert flag_value(argv, "--model-path") == "/models/qwen3"
    assert flag_value(argv, "--context-length") == "8192"
    assert flag_value(argv, "--mem-fraction-static") == "0.8"
    assert flag_value(argv, "--max-running-requests") == "4"
    assert "--enable-metrics" in argv
    assert spec.port == 30000  # the engine config's port wins over the default 18081
    assert default_port("sglang") == 18081
    assert reserved_gb(spec) == pytest.approx(0.8 * 110 + 30 + 2)
    assert any("hicache" in r.what for r in spec.reservations)


def test_executable_override_and_explicit_port():
    engine = EngineConfig(kind="llamacpp", executable=["/app/llama-server"])
    spec = build_spec(engine, profile(), "/m.gguf", port=18080, bind_host="127.0.0.1")
    assert spec.command[0] == "/app/llama-server"
    assert flag_value(spec.command, "--port") == "18080" and spec.port == 18080
    assert flag_value(spec.command, "--host") == "127.0.0.1"
    assert spec.command_line().startswith("/app/llama-server -m /m.gguf")


@pytest.mark.parametrize(
    ("path", "models_dir", "expected"),
    [
        ("qwen3/q4.gguf", "/srv/models", "/models/qwen3/q4.gguf"),
        ("/srv/models/gpt-oss-120b", "/srv/models", "/models/gpt-oss-120b"),
        ("/elsewhere/gemma.gguf", "/srv/models", "/models/gemma.gguf"),
        ("/elsewhere/gemma.gguf", None, "/models/gemma.gguf"),
    ],
)
def test_container_model_path(path, models_dir, expected):
    assert container_model_path(path, models_dir) == expected


def test_llamacpp_config_flags_replace_renamed_defaults():
    engine = EngineConfig(kind="llamacpp", extra_flags=["--load-mode", "none", "--flash-attn=auto"])
    argv = build_spec(engine, profile(), "/m.gguf").command
    assert "--no-mmap" not in argv and flag_value(argv, "--load-mode") == "none"
    assert "-fa" not in argv and "--flash-attn=auto" in argv
    assert flag_value(argv, "-ngl") == "999"  # untouched defaults stay


@pytest.mark.parametrize("kind", ["llamacpp", "vllm", "sglang"])
def test_comparable_flags_drop_paths_ports_and_names_and_keep_the_rest(kind: str) -> None:
    from strix_pipeline.engines import MODULES, comparable_flags

    a = build_spec(EngineConfig(kind=kind), profile(), "/models/a/q4.gguf", port=8001, bind_host="127.0.0.1")
    b = build_spec(EngineConfig(kind=kind), profile(served_name="other"), "/srv/b/q4.gguf", port=9009)
    kept = comparable_flags(kind, a.flags)
    # where the model is, what it is called and where the engine listens never split a series ...
    assert kept == comparable_flags(kind, b.flags)
    assert not {"/models/a/q4.gguf", "8001", "127.0.0.1"} & set(kept)
    assert not MODULES[kind].NOT_COMPARABLE_FLAGS & {f.split("=")[0] for f in kept}
    # ... but how it computes does
    c = build_spec(EngineConfig(kind=kind), profile(parallel=8), "/models/a/q4.gguf")
    assert comparable_flags(kind, c.flags) != kept
    assert str(profile().context_length) in " ".join(kept) or str(8192 * 4) in kept


def test_comparable_flags_strip_the_equals_spelling_too() -> None:
    from strix_pipeline.engines import comparable_flags

    assert comparable_flags("vllm", ["--model=/m", "--port=1", "--max-num-seqs", "4"]) == [
        "--max-num-seqs",
        "4",
    ]


def test_sglang_hicache_ratio_reserves_host_memory_too():
    def reserved(extra: list[str]) -> float:
        engine = EngineConfig(kind="sglang", extra_flags=extra)
        return reserved_gb(build_spec(engine, profile(memory_fraction=0.5), "/models/q", budget_gb=100))

    assert reserved([]) == pytest.approx(50)  # the static pool alone
    assert reserved(["--enable-hierarchical-cache"]) == pytest.approx(50 + 2 * 50)  # default ratio 2
    assert reserved(["--enable-hierarchical-cache", "--hicache-ratio", "1.5"]) == pytest.approx(50 + 75)
    assert reserved(["--hicache-ratio=3"]) == pytest.approx(50 + 150)
    # an explicit size wins over the ratio, counted once
    assert reserved(["--enable-hierarchical-cache", "--hicache-size", "20"]) == pytest.approx(70)


def test_no_engine_benchmarks_on_the_port_production_serves_by_convention():
    from strix_pipeline.engines import MODULES

    for kind, module in MODULES.items():
        production = {m.PRODUCTION_PORT for m in MODULES.values()}
        assert default_port(kind) not in production, kind
        assert module.DEFAULT_PORT != module.PRODUCTION_PORT
