"""The GGUF file format's header, read with the standard library alone: metadata, tensor infos (name,
shape, ggml type, offset) and where the tensor data starts; no tensor data is read.

The gguf package is not a dependency of the project's environment (only of the vLLM env), so the
header is parsed here (the format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md). Like
:mod:`.bytes_per_token`, which reads a model's bytes per token from it, this module imports nothing
but the standard library: both travel as source to the efficiency probe's container
(hosts/probes/efficiency.py), where this one is registered under its own name first.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["GGML_TYPE_SIZES", "ModelFileError", "read_gguf_header"]

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


class ModelFileError(ValueError):
    """A model file whose header cannot give the bytes per token; the message names the file and field."""


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
