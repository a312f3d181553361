"""Decode efficiency: the share of the measured memory-bandwidth limit a decode reaches.

``value = decode_tok_s * bytes_per_token / bandwidth_bytes_per_s``. At batch 1 a decode step reads
every weight and the context's KV once, so the memory bandwidth bounds decode speed and ``value`` lies
in (0, 1]. A figure outside that range is never returned as a value: it means an input is wrong, or
(above 1) that the weights sit in a cache the copy probe does not measure (a model smaller than the
L3, or a GPU's cache), and the result says which instead (``problem``; ``value`` is None). The inputs
are kept beside the figure so anyone can recompute it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Efficiency", "decode_efficiency"]


@dataclass(frozen=True)
class Efficiency:
    """``value`` in (0, 1], or None with ``problem`` saying which input is suspect."""

    value: float | None
    decode_tok_s: float
    bytes_per_token: float
    bandwidth_bytes_per_s: float
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bad(name: str, x: Any) -> str | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return f"{name}={x!r} is not a number"
    if not math.isfinite(x):
        return f"{name}={x!r} is not finite"
    if x <= 0:
        return f"{name}={x!r} is not positive"
    return None


def decode_efficiency(
    decode_tok_s: float, bytes_per_token: float, bandwidth_bytes_per_s: float
) -> Efficiency:
    """decode tok/s x bytes read per token / measured bandwidth, checked to lie in (0, 1]."""
    inputs = {
        "decode_tok_s": decode_tok_s,
        "bytes_per_token": bytes_per_token,
        "bandwidth_bytes_per_s": bandwidth_bytes_per_s,
    }
    wrong = [p for name, x in inputs.items() if (p := _bad(name, x)) is not None]
    if wrong:
        return Efficiency(None, **inputs, problem="an input is unusable: " + "; ".join(wrong))
    value = decode_tok_s * bytes_per_token / bandwidth_bytes_per_s
    if not math.isfinite(value) or value <= 0:  # an overflow or underflow of the product
        return Efficiency(None, **inputs, problem=f"the figure {value!r} is not a positive finite number")
    if value > 1:
        reads = decode_tok_s * bytes_per_token
        return Efficiency(
            None,
            **inputs,
            problem=(
                f"above 1 ({value:.3g}): the weights may sit in a cache the probe does not measure, or an "
                f"input is wrong: decode_tok_s={decode_tok_s:g} x bytes_per_token={bytes_per_token:.6g} "
                f"= {reads / 1e9:.3g} GB/s read, more than the measured "
                f"bandwidth_bytes_per_s={bandwidth_bytes_per_s / 1e9:.3g} GB/s (too high a decode speed, "
                "too many bytes per token, e.g. experts or an input embedding counted that are not read, "
                "or too low a bandwidth, e.g. a probe with fewer threads than the engine)"
            ),
        )
    return Efficiency(value, **inputs)
