"""A minimal GGUF writer (version 3, little-endian) for tests of the readers: metadata and tensor
infos as llama.cpp writes them, tensor data zeros; and a split GGUF as gguf-split writes it."""

from __future__ import annotations

import math
import struct
from pathlib import Path

F32, Q8_0, Q4_K = 0, 8, 12
_BYTES = {F32: (1, 4), Q8_0: (32, 34), Q4_K: (256, 144)}


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def _value(v) -> tuple[int, bytes]:
    if isinstance(v, str):
        return 8, _s(v)
    if isinstance(v, bool):
        return 7, struct.pack("<?", v)
    if isinstance(v, int):
        return 4, struct.pack("<I", v)
    if isinstance(v, float):
        return 6, struct.pack("<f", v)
    if isinstance(v, list):  # arrays of uint32 (per-layer counts) or of strings
        itype = 8 if v and isinstance(v[0], str) else 4
        body = b"".join(_value(x)[1] for x in v)
        return 9, struct.pack("<IQ", itype, len(v)) + body
    raise TypeError(v)


def write_gguf(path: Path, metadata: dict, tensors: list[tuple[str, list[int], int]], cut: int = 0) -> Path:
    """A GGUF with ``metadata`` and ``tensors`` (name, shape, ggml type); tensor data zeros, 32-aligned."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, v in metadata.items():
        vtype, body = _value(v)
        out += _s(key) + struct.pack("<I", vtype) + body
    offset, sizes = 0, []
    for name, shape, kind in tensors:
        block, per_block = _BYTES.get(kind, (1, 1))
        size = math.prod(shape) // block * per_block
        out += _s(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
        out += struct.pack("<IQ", kind, offset)
        sizes.append(size)
        offset += size + (-size % 32)
    out += b"\0" * (-len(out) % 32)
    out += b"\0" * offset
    path.write_bytes(out[: len(out) - cut] if cut else out)
    return path


def write_split(directory: Path, metadata: dict, tensors: list, parts: int = 2) -> list[Path]:
    """``tensors`` across ``parts`` files as gguf-split writes them: the metadata in the first, every part
    with its split.no / split.count, named <name>-0000N-of-0000M.gguf."""
    files = []
    for i in range(parts):
        meta = {"split.no": i, "split.count": parts, "split.tensors.count": len(tensors)}
        if i == 0:
            meta = metadata | meta
        mine = [t for j, t in enumerate(tensors) if j % parts == i]
        files.append(write_gguf(directory / f"toy-{i + 1:05d}-of-{parts:05d}.gguf", meta, mine))
    return files
