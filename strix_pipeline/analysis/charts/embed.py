"""Written charts read back: a PNG as base64 for Dagster's markdown (re-rendered narrower from its
Vega-Lite JSON), and every data record of a spec (tests read charts back)."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import vl_convert as vlc


def _png_width(data: bytes) -> int:
    # IHDR is the first chunk: 8-byte signature, 4-byte length, b"IHDR", then width, height
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    return struct.unpack(">I", data[16:20])[0]


def png_base64(path: Path, max_width: int = 600) -> str:
    """The PNG as base64 (for Dagster markdown metadata: `![](data:image/png;base64,...)`), at most
    `max_width` pixels wide: a wider one is re-rendered from its Vega-Lite JSON beside it."""
    path = Path(path)
    data = path.read_bytes()
    width = _png_width(data)
    spec = path.with_suffix(".vl.json")
    if width > max_width and spec.exists():
        # the PNG was written at scale 2; its natural width is half that
        natural = width / 2
        data = vlc.vegalite_to_png(spec.read_text(), scale=max_width / natural)
    return base64.b64encode(data).decode("ascii")


def markdown_image(path: Path, max_width: int = 600) -> str:
    return f"![{Path(path).stem}](data:image/png;base64,{png_base64(path, max_width)})"
