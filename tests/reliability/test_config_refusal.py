"""Bad configurations are refused when they are loaded -- by `strix` and by the Dagster definitions --
with the file and the key path named, never later in a run.

Each case mutates the Box example (config/strix-halo.example.toml), which loads as it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import REPO as REPO_ROOT

from strix_pipeline.config import ConfigError
from strix_pipeline.config_load import load_config

EXAMPLE = REPO_ROOT / "config" / "strix-halo.example.toml"


def _mutated(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    text = EXAMPLE.read_text()
    for old, new in edits:
        assert old in text, f"fixture drift: {old!r} not in {EXAMPLE.name}"
        text = text.replace(old, new, 1)
    path = tmp_path / "box.toml"
    path.write_text(text)
    return path


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: "), msg  # the file first
    return msg


def test_the_example_itself_loads() -> None:
    config = load_config(EXAMPLE)
    assert config.hosts["strix-halo"].memory_budget_gb == 120  # the budget the cases below exceed
    assert config.runs["strix-halo"]


UNKNOWN_KEYS = [
    ("[project]\n", "[project]\ncolour = 'blue'\n", "project.colour"),
    ("[slo]\n", "[sol]\nttft_ms = 1\n\n[slo]\n", "sol"),
    (
        "health_timeout_s = 600\n",
        "health_timeout_s = 600\nretries = 3\n",
        "hosts.strix-halo.production.retries",
    ),
    ("official = true\n", "official = true\ntagz = ['x']\n", "engines.llamacpp.images.0.tagz"),
    ("moe = true\n", "moe = true\nquantisation = 'Q4'\n", "models.qwen3-30b-a3b-gguf.quantisation"),
]


@pytest.mark.parametrize(("old", "new", "key_path"), UNKNOWN_KEYS, ids=[k for *_, k in UNKNOWN_KEYS])
def test_unknown_key_is_refused_with_its_path(tmp_path: Path, old: str, new: str, key_path: str) -> None:
    msg = _refused(_mutated(tmp_path, (old, new)))
    assert f"  {key_path}: unknown key" in msg, msg


BAD_CRONS = [
    ('schedule = "0 3 * * 1"', 'schedule = "0 3 * *"', "project.schedule", "0 3 * *"),
    ('schedule = "0 3 * * 1"', 'schedule = "61 3 * * 1"', "project.schedule", "61 3 * * 1"),
    (
        'maintenance_window = "0 3 * * *"',
        'maintenance_window = "every monday"',
        "hosts.strix-halo.maintenance_window",
        "every monday",
    ),
]


@pytest.mark.parametrize(("old", "new", "key_path", "value"), BAD_CRONS, ids=[c[3] for c in BAD_CRONS])
def test_bad_cron_is_refused_with_its_path(
    tmp_path: Path, old: str, new: str, key_path: str, value: str
) -> None:
    msg = _refused(_mutated(tmp_path, (old, new)))
    assert key_path in msg and f"cron expression {value!r} is not a valid 5-field cron expression" in msg, msg


@pytest.mark.parametrize(
    ("port", "problem"), [(70000, "less than 65536"), (0, "greater than 0"), (-1, "greater than 0")]
)
def test_port_out_of_range_is_refused_with_its_path(tmp_path: Path, port: int, problem: str) -> None:
    msg = _refused(_mutated(tmp_path, ("port = 18081\n", f"port = {port}\n")))
    assert f"engines.sglang.port: Input should be {problem} (got {port})" in msg, msg


def test_reservations_above_the_hosts_budget_are_refused_at_load(tmp_path: Path) -> None:
    # qwen3-30b-a3b: vLLM and SGLang pools 0.85 x 120 GB = 102 GB; 30 GB more for a host-RAM cache
    # (reserve_gb) is 132 GB, over the 120 GB budget -> the first run that uses it (runs.strix-halo[2])
    bad = _mutated(
        tmp_path, ("memory_fraction = 0.85          #", "reserve_gb = 30\nmemory_fraction = 0.85  #")
    )
    msg = _refused(bad)
    assert "runs.strix-halo[2] (engine 'vllm', model 'qwen3-30b-a3b') reserves 132.0 GB" in msg, msg
    assert "profile reserve_gb = 30.0 GB" in msg and "0.85 x budget 120 GB = 102.0 GB" in msg, msg
    # the run-time guard's own words (one rule): over the budget, by how much, and which key it is
    assert "over the host's memory_budget_gb 120 GB by 12.0 GB (hosts.strix-halo.memory_budget_gb)" in msg, (
        msg
    )


def test_an_engine_flag_that_locks_host_ram_counts_too(tmp_path: Path) -> None:
    # SGLang's HiCache beside its pool (the flag that OOM-looped a box): 102 + 24 GB > 120 GB
    flags = 'extra_flags = ["--attention-backend", "triton"'
    bad = _mutated(tmp_path, (flags, flags + ', "--hicache-size", "24"'))
    msg = _refused(bad)
    assert "runs.strix-halo[4] (engine 'sglang', model 'qwen3-30b-a3b') reserves 126.0 GB" in msg, msg
    assert "--hicache-size 24 = 24.0 GB" in msg, msg


def test_reservations_within_the_budget_load(tmp_path: Path) -> None:
    # the rule compares with the budget: 102 + 18 = 120 GB fits exactly; a host without a budget is
    # not checked (nothing to compare with)
    fits = _mutated(
        tmp_path, ("memory_fraction = 0.85          #", "reserve_gb = 18\nmemory_fraction = 0.85  #")
    )
    assert load_config(fits).models["qwen3-30b-a3b"].reserve_gb == 18
    over = ("memory_fraction = 0.85          #", "reserve_gb = 30\nmemory_fraction = 0.85  #")
    unbudgeted = _mutated(tmp_path, over, ("memory_budget_gb = 120", ""))
    assert load_config(unbudgeted).hosts["strix-halo"].memory_budget_gb is None


def test_dagster_definitions_refuse_it_at_load_too(tmp_path: Path) -> None:
    from strix_dagster.definitions import load_definitions

    bad = _mutated(
        tmp_path, ("memory_fraction = 0.85          #", "reserve_gb = 30\nmemory_fraction = 0.85  #")
    )
    with pytest.raises(ConfigError, match=r"runs\.strix-halo\[2\].*hosts\.strix-halo\.memory_budget_gb"):
        load_definitions(str(bad))
