"""The bytes a decoder reads from memory per generated token at batch 1: the numerator of decode efficiency.

One decode step reads every weight once (a tied embedding counts once: as the output projection it
is read whole; the row looked up at the input is part of it) and the K and V of every token in the
context once. So ``bytes_per_token(c) = weight_bytes + kv_bytes_per_token * c``. An untied input
embedding is not read whole (one row per token), so it is left out of ``weight_bytes`` when the file
has a separate output projection; ``details`` says so.

Two readers, each from the file's header alone (no tensor data is read):

- :func:`from_gguf`: the GGUF header (tensor infos: type and shape -> bytes; metadata: the
  architecture's block count, KV heads and head sizes), an f16 KV cache assumed (llama-server's
  default ``--cache-type-k/-v f16``);
- :func:`from_hf_checkpoint`: the ``*.safetensors`` JSON headers (dtype x shape) and ``config.json``
  (layers, KV heads, head dim), a bf16 KV cache assumed unless ``kv_dtype_bytes`` says otherwise.

The GGUF header itself is read by :mod:`.gguf_header`, the one module of the project this one imports:
both travel as source to the efficiency probe's container (hosts/probes/efficiency.py).
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from strix_pipeline.memory.gguf_header import GGML_TYPE_SIZES, ModelFileError, read_gguf_header

__all__ = [
    "ModelBytes",
    "ModelFileError",
    "from_gguf",
    "from_hf_checkpoint",
]

# safetensors dtype -> bytes per element
SAFETENSORS_DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}

F16_CACHE_BYTES = 2  # llama-server's default KV cache type: f16
BF16_CACHE_BYTES = 2  # vLLM's kv_cache_dtype "auto" on a bf16 checkpoint

# Input embedding -> the separate output projection whose presence means it is only looked up.
_GGUF_EMBEDDING, _GGUF_OUTPUT = "token_embd.weight", "output.weight"
_HF_EMBEDDINGS = ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight")
_HF_OUTPUT = "lm_head.weight"
_HF_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
_EXPERTS_NOTE = (
    "every expert counted: a token reads only the experts it is routed to, so weight_bytes is an upper bound"
)


@dataclass(frozen=True)
class ModelBytes:
    """What one decode step at batch 1 reads: all weights once, the KV of each token in context once."""

    weight_bytes: int
    kv_bytes_per_token: int
    source: str
    details: dict[str, Any] = field(default_factory=dict)

    def bytes_per_token(self, context_tokens: float) -> float:
        """Bytes read to generate one token with ``context_tokens`` tokens already in the KV cache."""
        if (
            not (isinstance(context_tokens, int | float) and math.isfinite(context_tokens))
            or context_tokens < 0
        ):
            raise ValueError(f"context_tokens={context_tokens!r}: a finite number of tokens >= 0")
        return self.weight_bytes + self.kv_bytes_per_token * context_tokens

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- GGUF


def _gguf_tensor_bytes(name: str, tensor: dict[str, Any]) -> int:
    kind = GGML_TYPE_SIZES.get(tensor["type"])
    if kind is None:
        raise ModelFileError(
            f"{name}: tensor {tensor['name']}: ggml type {tensor['type']} is not one this reader knows "
            f"({', '.join(n for n, _, _ in GGML_TYPE_SIZES.values())})"
        )
    _, block, block_bytes = kind
    elements = math.prod(tensor["shape"])
    if elements % block:
        raise ModelFileError(
            f"{name}: tensor {tensor['name']}: {elements} elements is not a whole number of {kind[0]} "
            f"blocks of {block}"
        )
    return elements // block * block_bytes


def _meta(name: str, metadata: dict[str, Any], key: str) -> Any:
    if key not in metadata:
        raise ModelFileError(f"{name}: metadata {key} missing")
    return metadata[key]


def _per_layer(name: str, key: str, value: Any, layers: int) -> list[int]:
    """A per-layer hyperparameter: one number for every layer, or an array with one per layer."""
    values = value if isinstance(value, list) else [value] * layers
    if len(values) != layers or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values
    ):
        raise ModelFileError(f"{name}: metadata {key} is {value!r}: expected a count (or {layers} of them)")
    return values


# llama.cpp's llama_split_path, "%s-%05d-of-%05d.gguf" (hosts/docker/model_files.py reads the same names; this
# module runs on its own in the efficiency probe's container, so it spells the pattern itself)
_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")


def _gguf_parts(path: Path, metadata: dict[str, Any]) -> list[Path]:
    """Every file of the model: a split GGUF (gguf-split's ``split.count`` > 1) is read from its first
    part, the others beside it by llama.cpp's names; any other GGUF is one file."""
    count = metadata.get("split.count")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 1:
        return [path]
    no = metadata.get("split.no", 0)
    if no != 0:
        raise ModelFileError(f"{path.name}: part {no + 1} of {count} of a split GGUF: give its first part")
    m = _SPLIT_NAME.match(path.name)
    if m is None or int(m["count"]) != count:
        raise ModelFileError(
            f"{path.name}: split.count is {count} but the name is not <name>-00001-of-{count:05d}.gguf"
        )
    return [path] + [
        path.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(2, count + 1)
    ]


def _part_sizes(path: Path, tensors: list[dict[str, Any]], data_start: int) -> dict[str, int]:
    """Each tensor's bytes in one file, checked against the file's size."""
    name = path.name
    sizes = {t["name"]: _gguf_tensor_bytes(name, t) for t in tensors}
    file_size = path.stat().st_size
    for t in tensors:
        end = data_start + t["offset"] + sizes[t["name"]]
        if end > file_size:
            raise ModelFileError(
                f"{name}: tensor {t['name']} ends at byte {end}, beyond the file's {file_size} "
                "(truncated file?)"
            )
    return sizes


def from_gguf(path: Path) -> ModelBytes:
    """Weight bytes from the GGUF's tensor infos (every part of a split GGUF); KV bytes per token from
    its metadata (f16 cache)."""
    path = Path(path)
    name = path.name
    metadata, tensors, data_start = read_gguf_header(path)
    sizes = _part_sizes(path, tensors, data_start)
    parts = _gguf_parts(path, metadata)
    for part in parts[1:]:
        if not part.is_file():
            raise ModelFileError(f"{name}: part {part.name} of the split GGUF is not beside it")
        _, more, more_start = read_gguf_header(part)
        sizes |= _part_sizes(part, more, more_start)
        tensors = tensors + more
    arch = _meta(name, metadata, "general.architecture")
    layers = _meta(name, metadata, f"{arch}.block_count")
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise ModelFileError(f"{name}: metadata {arch}.block_count is {layers!r}: expected a count >= 1")
    heads_key, kv_key = f"{arch}.attention.head_count", f"{arch}.attention.head_count_kv"
    kv_from = kv_key if kv_key in metadata else heads_key  # no head_count_kv: one KV head per head
    kv_heads = _per_layer(name, kv_from, _meta(name, metadata, kv_from), layers)
    k_key, v_key = f"{arch}.attention.key_length", f"{arch}.attention.value_length"
    head_sizes = {}
    for key in (k_key, v_key):
        if key in metadata:
            head_sizes[key] = metadata[key]
        else:  # the architecture's default: embedding_length / head_count
            emb = _meta(name, metadata, f"{arch}.embedding_length")
            heads = _per_layer(name, heads_key, _meta(name, metadata, heads_key), layers)
            if not heads[0] or emb % heads[0]:
                raise ModelFileError(
                    f"{name}: metadata {key} missing and {arch}.embedding_length={emb} "
                    f"is not a multiple of {heads_key}={heads[0]}"
                )
            head_sizes[key] = emb // heads[0]
        if not isinstance(head_sizes[key], int) or head_sizes[key] < 1:
            raise ModelFileError(f"{name}: metadata {key} is {head_sizes[key]!r}: expected a size >= 1")
    kv = sum(h * (head_sizes[k_key] + head_sizes[v_key]) * F16_CACHE_BYTES for h in kv_heads)
    weights, excluded = _without_looked_up_embedding(sizes, _GGUF_EMBEDDING, _GGUF_OUTPUT)
    details = {
        "file": str(path),
        "parts": len(parts),
        "architecture": arch,
        "tensors": len(tensors),
        "block_count": layers,
        "head_count_kv": kv_heads if isinstance(metadata[kv_from], list) else kv_heads[0],
        "head_count_kv_from": kv_from,
        "key_length": head_sizes[k_key],
        "value_length": head_sizes[v_key],
        "kv_cache_type": "f16 (llama-server's default --cache-type-k/-v)",
        "kv_bytes_per_element": F16_CACHE_BYTES,
        "tensor_types": _type_bytes(tensors, sizes),
        "output_tied_to_embedding": _GGUF_OUTPUT not in sizes,
        "embedding_bytes_excluded": excluded,
    }
    details |= _window(metadata.get(f"{arch}.attention.sliding_window"))
    experts = metadata.get(f"{arch}.expert_count")
    if isinstance(experts, int) and experts > 1:
        details |= {
            "expert_count": experts,
            "expert_used_count": metadata.get(f"{arch}.expert_used_count"),
            "weights_note": _EXPERTS_NOTE,
        }
    return ModelBytes(weights, kv, f"gguf:{name}", details)


def _type_bytes(tensors: list[dict[str, Any]], sizes: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tensors:
        kind = GGML_TYPE_SIZES[t["type"]][0]
        out[kind] = out.get(kind, 0) + sizes[t["name"]]
    return dict(sorted(out.items()))


def _without_looked_up_embedding(
    sizes: dict[str, int], embeddings: str | tuple[str, ...], output: str
) -> tuple[int, int]:
    """(weight bytes read per step, input-embedding bytes left out): an embedding is read whole only
    when it is also the output projection (tied)."""
    total = sum(sizes.values())
    if output not in sizes:
        return total, 0
    names = (embeddings,) if isinstance(embeddings, str) else embeddings
    excluded = sum(sizes.get(n, 0) for n in names)
    return total - excluded, excluded


def _window(window: Any) -> dict[str, Any]:
    """A sliding-window attention note: its layers read at most ``window`` tokens of KV, so beyond it
    ``kv_bytes_per_token * context`` is an upper bound (this linear model counts every layer)."""
    if not isinstance(window, int) or window <= 0:
        return {}
    return {
        "sliding_window": window,
        "kv_note": f"KV counted for every layer over the whole context: exact up to {window} tokens, "
        "an upper bound beyond (sliding-window layers read at most the window)",
    }


# ---- Hugging Face checkpoint (safetensors + config.json)


def _safetensors_sizes(path: Path) -> dict[str, int]:
    name = path.name
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ModelFileError(f"{name}: shorter than a safetensors header length (8 bytes)")
            n = struct.unpack("<Q", head)[0]
            if n > 100 * 1024 * 1024:
                raise ModelFileError(f"{name}: header length {n} bytes (corrupt file)")
            raw = f.read(n)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read ({e.strerror or e})") from e
    if len(raw) != n:
        raise ModelFileError(f"{name}: the file ends inside its {n}-byte JSON header")
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise ModelFileError(f"{name}: the JSON header does not parse ({e})") from e
    if not isinstance(header, dict):
        raise ModelFileError(f"{name}: the JSON header is not an object")
    sizes = {}
    for tname, info in header.items():
        if tname == "__metadata__":
            continue
        dtype = info.get("dtype") if isinstance(info, dict) else None
        shape = info.get("shape") if isinstance(info, dict) else None
        if dtype not in SAFETENSORS_DTYPE_BYTES:
            raise ModelFileError(f"{name}: tensor {tname}: dtype {dtype!r} is not a safetensors dtype")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ModelFileError(f"{name}: tensor {tname}: shape {shape!r} is not a list of sizes")
        sizes[tname] = math.prod(shape) * SAFETENSORS_DTYPE_BYTES[dtype]
    return sizes


def _config_int(name: str, config: dict[str, Any], key: str, prefix: str) -> int:
    value = config.get(key)
    if value is None:
        raise ModelFileError(f"{name}: field {prefix}{key} missing")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ModelFileError(f"{name}: field {prefix}{key} is {value!r}: expected a whole number >= 1")
    return value


def from_hf_checkpoint(directory: Path, kv_dtype_bytes: int = BF16_CACHE_BYTES) -> ModelBytes:
    """Weight bytes from the ``*.safetensors`` headers; KV bytes per token from ``config.json``."""
    directory = Path(directory)
    if not isinstance(kv_dtype_bytes, int) or kv_dtype_bytes < 1:
        raise ValueError(f"kv_dtype_bytes={kv_dtype_bytes!r}: bytes per KV cache element, >= 1")
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelFileError(f"{directory}: no *.safetensors file")
    sizes: dict[str, int] = {}
    for path in files:
        sizes |= _safetensors_sizes(path)
    cfg_path = directory / "config.json"
    try:
        config = json.loads(cfg_path.read_text())
    except OSError as e:
        raise ModelFileError(f"{cfg_path}: cannot be read ({e.strerror or e})") from e
    except ValueError as e:
        raise ModelFileError(f"config.json: does not parse ({e})") from e
    if not isinstance(config, dict):
        raise ModelFileError("config.json: not a JSON object")
    # A multimodal checkpoint keeps the decoder's hyperparameters under text_config.
    prefix = ""
    if isinstance(config.get("text_config"), dict):
        config, prefix = config["text_config"], "text_config."
    layers = _config_int("config.json", config, "num_hidden_layers", prefix)
    heads_field = (
        "num_key_value_heads" if config.get("num_key_value_heads") is not None else "num_attention_heads"
    )
    kv_heads = _config_int("config.json", config, heads_field, prefix)
    if config.get("head_dim") is not None:
        head_dim = _config_int("config.json", config, "head_dim", prefix)
    else:
        hidden = _config_int("config.json", config, "hidden_size", prefix)
        heads = _config_int("config.json", config, "num_attention_heads", prefix)
        if hidden % heads:
            raise ModelFileError(
                f"config.json: field {prefix}head_dim missing and {prefix}hidden_size={hidden} is not a "
                f"multiple of {prefix}num_attention_heads={heads}"
            )
        head_dim = hidden // heads
    kv = 2 * layers * kv_heads * head_dim * kv_dtype_bytes
    weights, excluded = _without_looked_up_embedding(sizes, _HF_EMBEDDINGS, _HF_OUTPUT)
    details = {
        "directory": str(directory),
        "files": [p.name for p in files],
        "tensors": len(sizes),
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "kv_heads_from": prefix + heads_field,
        "head_dim": head_dim,
        "kv_bytes_per_element": kv_dtype_bytes,
        "kv_cache_type": "bf16 (vLLM's kv_cache_dtype auto on a bf16 checkpoint)"
        if kv_dtype_bytes == BF16_CACHE_BYTES
        else f"{kv_dtype_bytes} byte(s) per element (as told)",
        "output_tied_to_embedding": _HF_OUTPUT not in sizes,
        "embedding_bytes_excluded": excluded,
    }
    if config.get("use_sliding_window") is not False:  # Qwen2 states a window it does not use
        details |= _window(config.get("sliding_window"))
    experts = next((config[k] for k in _HF_EXPERTS if isinstance(config.get(k), int)), None)
    if experts is not None and experts > 1:
        details |= {"expert_count": experts, "weights_note": _EXPERTS_NOTE}
    return ModelBytes(weights, kv, f"safetensors:{directory.name}", details)
