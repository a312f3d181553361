"""The field report's HiCache setting passes the budget (0.55 x 120 + 20 = 86 GB) and
OOM-looped the Box; on a unified-memory host it is refused when the file is read, naming the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import REPO

from strix_pipeline.config import ConfigError
from strix_pipeline.config_load import load_config

EXAMPLE = REPO / "config" / "strix-halo.example.toml"


def with_sglang_flags(tmp_path: Path, flags: list[str], *, unified: bool = True) -> Path:
    """The example config with ``flags`` added to SGLang's engine-wide flags."""
    text = EXAMPLE.read_text()
    section = text.index("[engines.sglang]")
    at = text.index("extra_flags = [", section) + len("extra_flags = [")
    text = text[:at] + "".join(f'"{f}", ' for f in flags) + text[at:]
    if not unified:
        text = text.replace("unified_memory = true", "unified_memory = false")
    path = tmp_path / "strix.toml"
    path.write_text(text)
    return path


def test_hicache_on_the_unified_memory_box_is_refused_at_load_naming_the_run(tmp_path):
    path = with_sglang_flags(tmp_path, ["--mem-fraction-static", "0.55", "--hicache-size", "20"])
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert str(path) in msg and "1 problem(s)" in msg, msg
    assert "runs.strix-halo[4] (engine 'sglang', model 'qwen3-30b-a3b')" in msg, msg
    assert "SGLang HiCache (--hicache-size) on a unified-memory host" in msg and "never enable it" in msg
    assert "(hosts.strix-halo.unified_memory)" in msg


def test_the_same_flags_load_on_a_host_that_is_not_unified_memory(tmp_path):
    path = with_sglang_flags(
        tmp_path, ["--mem-fraction-static", "0.55", "--hicache-size", "20"], unified=False
    )
    assert load_config(path).hosts["strix-halo"].unified_memory is False


def test_the_example_config_loads_with_its_idle_ceiling():
    host = load_config(EXAMPLE).hosts["strix-halo"]
    assert host.unified_memory is True
    assert (
        host.idle_ceiling_gb is not None and 0.6 < host.idle_ceiling_gb <= 2
    )  # the field report's ~0.6 GB + margin
