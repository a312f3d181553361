"""vLLM's KV sizing for a token capacity, checked against vLLM 0.32's own log on Gemma 3 270M."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strix_pipeline.memory.breakdown import parse_vllm_log
from strix_pipeline.memory.bytes_per_token import ModelFileError
from strix_pipeline.memory.kv_capacity import (
    FULL,
    GPU_BLOCK_SIZE,
    layout_from_config,
    layout_from_config_json,
    vllm_kv_bytes_for,
    vllm_kv_sizing,
)

FIXTURES = Path(__file__).parents[2] / "fixtures"
GEMMA = FIXTURES / "gemma3-270m-bf16"  # the converted checkpoint's config.json, as make run wrote it
VLLM_LOG = FIXTURES / "engine_logs" / "vllm-0.32.0-cpu-2gib.log"  # lines of the make run's vLLM log


def test_gemma3_layout_from_its_config() -> None:
    layout = layout_from_config(GEMMA)
    assert len(layout.windows) == 18
    assert layout.windows.count(FULL) == 3 and layout.windows.count(512) == 15
    assert (layout.kv_heads, layout.head_dim, layout.dtype_bytes) == (1, 256, 2)


def test_reproduces_vllms_own_figures_for_the_budget_it_was_given() -> None:
    logged = parse_vllm_log(VLLM_LOG.read_text())
    assert logged.kv_bytes == 2 * 1024**3 and logged.kv_capacity_tokens == 110_733
    sizing = vllm_kv_sizing(layout_from_config(GEMMA), logged.kv_bytes, 2048)
    assert len(sizing.groups) == 6 and sizing.group_size == 3  # "kv cache group sizes (128 x 6)"
    assert sizing.capacity_tokens == logged.kv_capacity_tokens
    assert round(sizing.max_concurrency, 2) == logged.max_concurrency == 54.07


def test_budget_for_the_same_context_holds_exactly_the_slots() -> None:
    layout = layout_from_config(GEMMA)
    sizing = vllm_kv_bytes_for(layout, 2048, 8)
    assert sizing.max_concurrency == 8.0 and sizing.capacity_tokens == 8 * 2048
    # one block less and the eighth full-length request no longer fits
    less = vllm_kv_sizing(layout, sizing.bytes - 1, 2048)
    assert less.max_concurrency < 8
    # a few hundred MB, not the 2 GiB a fixed pool took
    assert 250e6 < sizing.bytes < 400e6


def test_a_long_context_lets_the_sliding_layers_keep_only_their_window() -> None:
    layout = layout_from_config(GEMMA)
    short, long = vllm_kv_bytes_for(layout, 2048, 1), vllm_kv_bytes_for(layout, 32768, 1)
    # full-attention groups grow 16x, the five sliding ones stay at window + one batch
    assert long.blocks_per_request == 256 + 5 * (-(-(511 + 2048) // 128) + 1)
    assert long.bytes < 16 * short.bytes


def test_uniform_full_attention_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {"num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 64, "num_attention_heads": 8}
        )
    )
    sizing = vllm_kv_bytes_for(layout_from_config(tmp_path), 1000, 3, block_size=16)
    # 4 layers x 16 tokens x 2 heads x 64 x 2 x 2 B per block, ceil(1000 / 16) = 63 blocks per request
    assert sizing.block_bytes == 4 * 16 * 2 * 64 * 2 * 2 and sizing.blocks_per_request == 63
    assert sizing.bytes == sizing.block_bytes * 63 * 3


def test_bad_config_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "layer_types": ["x", "y"]}))
    with pytest.raises(ModelFileError, match="num_key_value_heads|num_attention_heads|layer_types"):
        layout_from_config(tmp_path)


def test_a_config_read_elsewhere_goes_through_the_same_parser() -> None:
    """The Docker host reads config.json through the engine's image (hosts/docker/model_config.py): the parsed
    JSON gives the directory's layout, and an error names where it was read."""
    parsed = json.loads((GEMMA / "config.json").read_text())
    assert layout_from_config_json(parsed, "elsewhere") == layout_from_config(GEMMA)
    where = "/models/q/config.json in vllm/vllm-openai-rocm@sha256:ab"
    with pytest.raises(
        ModelFileError, match=r"^/models/q/config.json in vllm/.+: field num_hidden_layers is 0"
    ):
        layout_from_config_json({"num_hidden_layers": 0}, where)


def test_gpu_blocks_of_16_for_the_same_context() -> None:
    # a page 16 x 1 x 256 x 2 x 2 B, a pool block 3 pages; 128 + 5 x 129 blocks a 2,048-token request
    sizing = vllm_kv_bytes_for(layout_from_config(GEMMA), 2048, 8, block_size=GPU_BLOCK_SIZE)
    assert (sizing.block_bytes, sizing.blocks_per_request) == (49_152, 128 + 5 * 129)
    assert sizing.bytes == 303_955_968 and sizing.capacity_tokens == 8 * 2048
