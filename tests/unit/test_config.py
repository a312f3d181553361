"""Configuration: the shipped files validate; bad files fail at load naming file, key path and problem."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from support.paths import REPO as REPO_ROOT

from strix_pipeline.config import DEFAULT_CONFIG, ConfigError, DockerHostConfig, LocalHostConfig, config_path
from strix_pipeline.config_load import load_config

DEFAULT = DEFAULT_CONFIG
EXAMPLE = REPO_ROOT / "config" / "strix-halo.example.toml"


def test_default_config_is_the_embedded_local_host():
    c = load_config(DEFAULT)
    assert c.hosts["local"].kind == "local"
    # both real engines on the same model family, each with the quantization it serves, and
    # llama-server at vLLM's weights too (the equal-weights match-up)
    assert [(r.engine, r.model) for r in c.runs["local"]] == [
        ("llamacpp", "gemma3-270m"),
        ("vllm", "gemma3-270m-bf16"),
        ("llamacpp", "gemma3-270m-bf16-gguf"),
    ]
    assert c.models["gemma3-270m"].quantization == "Q4_K_M"
    assert (
        c.models["gemma3-270m-bf16"].quantization == c.models["gemma3-270m-bf16-gguf"].quantization == "BF16"
    )
    assert (
        len({c.models[m].family for m in ("gemma3-270m", "gemma3-270m-bf16", "gemma3-270m-bf16-gguf")}) == 1
    )
    # production's side is the Q4_K_M profile, and it decides
    assert c.decision.baseline_model == "gemma3-270m" and c.decision.decided_by == "production"
    assert c.decision.host == "local"
    # C2 and C4 need models a CPU host does not serve: not required there, and said so
    assert c.decision.required == ["C1", "C3", "C5", "C6"] and c.decision.not_required_because
    # the owner's SLOs (C6), set to what two CPU cores serve at the decision's 5 clients
    assert c.decision.slo is not None and c.decision.slo_concurrency == 5
    assert (c.decision.slo.ttft_ms, c.decision.slo.tpot_ms, c.decision.slo.e2e_ms) == (5000, 500, 60000)


def test_example_box_config_describes_the_three_engines():
    c = load_config(EXAMPLE)
    box = c.hosts["strix-halo"]
    assert box.kind == "docker" and box.docker_host.startswith("ssh://")
    assert {e.kind for e in c.engines.values()} == {"llamacpp", "vllm", "sglang"}
    repos = {s.repository for e in c.engines.values() for s in e.images}
    # SGLang's own gfx1151 builds, not lmsysorg/sglang's CDNA tags; every image passes the arch gate
    assert {"vllm/vllm-openai-rocm", "ggml-org/llama.cpp", "rocm/sgl-dev"} <= repos
    assert "lmsysorg/sglang" not in repos and box.gpu_target == "gfx1151"
    toolbox = next(s for s in c.engines["llamacpp"].images if s.repository.endswith("strix-halo-toolboxes"))
    assert toolbox.executable == ["/usr/local/bin/llama-server"]
    assert c.models[c.decision.gpt_oss_model].quantization == "MXFP4"
    assert box.production is not None and box.production.health_url.endswith("/health")
    for e in c.engines.values():
        assert "HSA_OVERRIDE_GFX_VERSION" not in e.env


def test_strix_config_env_selects_another_file(monkeypatch):
    monkeypatch.setenv("STRIX_CONFIG", str(EXAMPLE))
    assert config_path() == EXAMPLE
    assert load_config().decision.host == "strix-halo"
    monkeypatch.delenv("STRIX_CONFIG")
    assert config_path() == DEFAULT


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    return p


def _mutated(tmp_path: Path, old: str, new: str) -> Path:
    text = DEFAULT.read_text()
    assert old in text, f"fixture drift: {old!r} not in strix.toml"
    return _write(tmp_path, text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("old", "new", "key_path", "problem"),
    [
        # unknown key
        ('kind = "local"\n', 'kind = "local"\ncolour = "blue"\n', "hosts.local.colour", "unknown key"),
        # wrong type
        ("levels = [1, 2, 4, 5]", 'levels = "1,2,4"', "profiles.quick.concurrency_sweep.levels", "list"),
        # out of range
        ("parallel = 8", "parallel = 0", "models.gemma3-270m.parallel", "greater than 0"),
        ("sample_interval_s = 0.5", "sample_interval_s = 600", "hosts.local.sample_interval_s", "less than"),
        # a value that is not one of the allowed ones
        ('kind = "llamacpp"', 'kind = "ollama"', "engines.llamacpp.kind", "llamacpp"),
        # a dangling reference
        ('engine = "llamacpp", model', 'engine = "vllm2", model', "runs.local[0].engine", "no engine named"),
        # a bad regular expression
        ("include = ['^v\\d+", "include = ['^v(\\d+", "engines.vllm.images.0.include", "regular expression"),
    ],
)
def test_invalid_config_names_file_key_and_problem(tmp_path, old, new, key_path, problem):
    bad = _mutated(tmp_path, old, new)
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    msg = str(info.value)
    assert str(bad) in msg
    assert key_path in msg, msg
    assert problem in msg, msg


def test_the_shipped_hosts_load_as_their_kind():
    assert isinstance(load_config(DEFAULT).hosts["local"], LocalHostConfig)
    box = load_config(EXAMPLE).hosts["strix-halo"]
    assert isinstance(box, DockerHostConfig) and box.docker_host.startswith("ssh://")


@pytest.mark.parametrize(
    "line",
    [
        'docker_host = "unix:///var/run/docker.sock"',
        'address = "box.lan"',
        "memory_budget_gb = 100",
        'maintenance_window = "0 3 * * *"',
        'probe_image = "busybox:1.36"',
        'models_dir = "/srv/models"',
        "devices = []",
        'gpu_target = "gfx1151"',
        "idle_ceiling_gb = 1.5",
    ],
)
def test_a_docker_hosts_key_on_a_local_host_is_refused_naming_host_and_key(tmp_path, line):
    bad = _mutated(tmp_path, 'kind = "local"\n', f'kind = "local"\n{line}\n')
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    key = line.split(" = ")[0]
    assert (
        f"hosts.local.{key}: unknown key: a key of hosts of kind 'docker', and this one is of kind 'local'"
        in str(info.value)
    ), str(info.value)


def test_a_local_hosts_key_on_a_docker_host_and_a_bad_kind_are_refused_by_key(tmp_path):
    text = EXAMPLE.read_text()
    assert 'kind = "docker"\n' in text
    bad = _write(tmp_path, text.replace('kind = "docker"\n', 'kind = "docker"\nengine_cache_gb = 12\n', 1))
    with pytest.raises(
        ConfigError,
        match=r"hosts\.strix-halo\.engine_cache_gb: unknown key: a key of hosts of "
        r"kind 'local', and this one is of kind 'docker' \(got 12\)",
    ):
        load_config(bad)
    missing = _write(tmp_path, text.replace('docker_host = "ssh://{user}@strix-halo.lan"\n', "", 1))
    with pytest.raises(ConfigError, match=r"hosts\.strix-halo\.docker_host: Field required"):
        load_config(missing)
    for kind, problem in (
        ('kind = "lokal"\n', "Input should be 'local' or 'docker' (got 'lokal')"),
        ("", "Field required"),
    ):
        wrong = _mutated(tmp_path, 'kind = "local"\n', kind)
        with pytest.raises(ConfigError) as info:
            load_config(wrong)
        assert f"hosts.local.kind: {problem}" in str(info.value), str(info.value)


def test_hsa_override_is_refused(tmp_path):
    text = DEFAULT.read_text().replace(
        'role = "candidate"\n', 'role = "candidate"\nenv = { HSA_OVERRIDE_GFX_VERSION = "11.0.0" }\n'
    )
    with pytest.raises(ConfigError, match=r"engines\.vllm\.env.*HSA_OVERRIDE_GFX_VERSION"):
        load_config(_write(tmp_path, text))


def test_missing_section_and_non_toml(tmp_path):
    data = tomllib.loads(DEFAULT.read_text())
    assert "models" in data
    no_models = DEFAULT.read_text().split("[models.gemma3-270m]")[0]
    with pytest.raises(ConfigError, match=r"models: Field required"):
        load_config(_write(tmp_path, no_models))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(_write(tmp_path, "[hosts\n"))
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "nope.toml"))):
        load_config(tmp_path / "nope.toml")


def test_definitions_refuse_a_bad_config_at_load(tmp_path):
    from strix_dagster.definitions import load_definitions

    bad = _mutated(tmp_path, "parallel = 8", "parallel = -1")
    with pytest.raises(ConfigError, match=r"models\.gemma3-270m\.parallel"):
        load_definitions(str(bad))


def test_the_box_profiles_prefill_ladder_reaches_32k_and_64k_where_the_model_allows():
    from strix_pipeline.loadgen.scenarios import ladder_levels

    c = load_config(EXAMPLE)
    ladder = c.profiles["standard"].prefill_ladder

    def planned(model: str) -> tuple[list[int], str | None]:  # what the ladder scenario will send
        return ladder_levels(ladder.input_tokens, c.models[model].context_length, ladder.output_tokens)

    assert {32768, 65536} <= set(ladder.input_tokens)
    for model in ("gpt-oss-120b", "gpt-oss-120b-gguf"):  # 131,072 natively: the field report's 64K point
        assert planned(model) == (ladder.input_tokens, None), model
    for model in ("qwen3-30b-a3b", "qwen3-30b-a3b-gguf"):  # 32,768 natively (no YaRN)
        levels, note = planned(model)
        assert levels[-1] == 32768 and 65536 not in levels, model
        assert note and note.startswith("prefill_ladder: 65536 > context 33792, not sent"), note
    # the pair C3/C5 compare runs at one context length
    assert c.models["qwen3-30b-a3b"].context_length == c.models["qwen3-30b-a3b-gguf"].context_length
