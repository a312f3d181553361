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

The gguf package is not a dependency of the project's environment (only of the vLLM env), so the
GGUF header is parsed here (the format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "GGML_TYPE_SIZES",
    "ModelBytes",
    "ModelFileError",
    "from_gguf",
    "from_hf_checkpoint",
    "read_gguf_header",
]

# ggml type id -> (name, elements per block, bytes per block); gguf-py's GGML_QUANT_SIZES
GGML_TYPE_SIZES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}

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


class ModelFileError(ValueError):
    """A model file whose header cannot give the bytes per token; the message names the file and field."""


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


_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
# A header is kilobytes to a few MiB (the tokenizer's vocabulary); a length beyond this is a corrupt file.
_MAX_LEN = 1 << 31


class _Reader:
    def __init__(self, f: BinaryIO, name: str) -> None:
        self.f, self.name = f, name

    def take(self, n: int, what: str) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise ModelFileError(f"{self.name}: the file ends inside the header ({what})")
        return data

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("<Q", what)
        if n > _MAX_LEN:
            raise ModelFileError(f"{self.name}: {what}: a string of {n} bytes (corrupt header)")
        return self.take(n, what).decode("utf-8", errors="replace")

    def value(self, vtype: int, what: str) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype], what)
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            itype, count = self.unpack("<I", what), self.unpack("<Q", what)
            if count > _MAX_LEN:
                raise ModelFileError(f"{self.name}: {what}: an array of {count} items (corrupt header)")
            if itype in _SCALARS:  # one read for the whole array: the vocabulary's scores are 262k floats
                fmt = _SCALARS[itype]
                size = struct.calcsize(fmt)
                return list(struct.unpack(f"<{count}{fmt[1]}", self.take(size * count, what)))
            return [self.value(itype, what) for _ in range(count)]
        raise ModelFileError(f"{self.name}: {what}: unknown metadata value type {vtype}")


def read_gguf_header(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """(metadata, tensor infos, offset of the tensor data) of a GGUF file (versions 2 and 3)."""
    path = Path(path)
    name = path.name
    try:
        f = path.open("rb")
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read ({e.strerror or e})") from e
    with f:
        r = _Reader(f, name)
        magic = r.take(4, "magic")
        if magic != b"GGUF":
            raise ModelFileError(f"{name}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
        version = r.unpack("<I", "version")
        if version in (2 << 24, 3 << 24):
            raise ModelFileError(f"{name}: a big-endian GGUF (only little-endian files are read)")
        if version not in (2, 3):
            raise ModelFileError(f"{name}: GGUF version {version} (versions 2 and 3 are read)")
        n_tensors, n_kv = r.unpack("<Q", "tensor_count"), r.unpack("<Q", "metadata_kv_count")
        if n_tensors > _MAX_LEN or n_kv > _MAX_LEN:
            raise ModelFileError(f"{name}: {n_tensors} tensors, {n_kv} metadata keys (corrupt header)")
        metadata: dict[str, Any] = {}
        for i in range(n_kv):
            key = r.string(f"metadata key {i}")
            metadata[key] = r.value(r.unpack("<I", f"metadata {key} type"), f"metadata {key}")
        tensors = []
        for i in range(n_tensors):
            tname = r.string(f"tensor info {i} name")
            n_dims = r.unpack("<I", f"tensor {tname} n_dims")
            if n_dims > 8:
                raise ModelFileError(f"{name}: tensor {tname}: {n_dims} dimensions (corrupt header)")
            shape = [r.unpack("<Q", f"tensor {tname} shape") for _ in range(n_dims)]
            ggml_type = r.unpack("<I", f"tensor {tname} type")
            offset = r.unpack("<Q", f"tensor {tname} offset")
            tensors.append({"name": tname, "shape": shape, "type": ggml_type, "offset": offset})
        alignment = metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment < 1:
            raise ModelFileError(f"{name}: metadata general.alignment is {alignment!r}")
        here = f.tell()
        data_start = here + (-here % alignment)
    return metadata, tensors, data_start


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


# llama.cpp's llama_split_path, "%s-%05d-of-%05d.gguf" (hosts/model_files.py reads the same names; this
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
                f"{name}: tensor {t['name']} ends at byte {end}, beyond the file's {file_size} (truncated file?)"
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
