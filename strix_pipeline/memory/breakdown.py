"""An engine's held memory broken down into weights, KV cache and the rest, from its own log lines.

One parse table per engine: each row is a pattern of a line the engine prints at load and what its
number is (weights or KV cache) in which unit. The rest is the run's held figure (the memory samples:
memory/summary.py) minus both, so the three add up to what the host measured; a figure the log does not
give stays None ("not in the log"), never 0.

- vLLM 0.32 on the CPU: "Checkpoint size: 0.50 GiB" (weights, as loaded: the checkpoint's dtype),
  "Explicitly set (2.0/23.54) GiB for KV cache" (the KV pool), "CPU KV cache size: 110,733 tokens,
  Maximum concurrency for 2,048 tokens per request: 54.07x"; on a GPU "Model loading took X GiB" and
  "Available KV cache memory: Y GiB".
- llama-server: "model buffer size = X MiB" (summed over buffers), "KV buffer size = X MiB" /
  "llama_kv_cache: size = X MiB" (summed: an iSWA cache prints one per part), "compute buffer size".
  Those are llama.cpp's log lines at verbosity 4 (``-lv 4``, engines.llamacpp.LOG_VERBOSITY, which the local
  launcher passes); the default (3) prints none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from strix_pipeline.units import GIB

MIB = 1024**2
_NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


@dataclass(frozen=True)
class Row:
    what: str  # "weights" | "kv" | "compute" | "kv_tokens" | "concurrency"
    pattern: re.Pattern[str]
    unit: float  # bytes per unit of the number (1 for counts)
    sums: bool = False  # several lines add up (llama.cpp prints one per buffer)


VLLM_TABLE: tuple[Row, ...] = (
    Row("weights", re.compile(rf"Model loading took {_NUMBER} ?GiB"), GIB),
    Row("weights", re.compile(rf"Checkpoint size: {_NUMBER} ?GiB"), GIB),
    Row("kv", re.compile(rf"Explicitly set \({_NUMBER}/[0-9.]+\) ?GiB for KV cache"), GIB),
    Row("kv", re.compile(rf"Available KV cache memory:? {_NUMBER} ?GiB"), GIB),
    Row("kv", re.compile(rf"--kv-cache-memory-bytes[ =]{_NUMBER}"), 1),  # exact: the launch line
    Row("kv_tokens", re.compile(rf"KV cache size: {_NUMBER} tokens"), 1),
    Row("concurrency", re.compile(rf"Maximum concurrency for [0-9,]+ tokens per request: {_NUMBER}x"), 1),
)
LLAMACPP_TABLE: tuple[Row, ...] = (
    Row("weights", re.compile(rf"model buffer size = +{_NUMBER} MiB"), MIB, sums=True),
    Row("kv", re.compile(rf"KV buffer size = +{_NUMBER} MiB"), MIB, sums=True),
    Row("kv", re.compile(rf"llama_kv_cache(?:_unified|_iswa)?: +size = +{_NUMBER} MiB"), MIB, sums=True),
    Row("compute", re.compile(rf"compute buffer size = +{_NUMBER} MiB"), MIB, sums=True),
)
TABLES = {"vllm": VLLM_TABLE, "llamacpp": LLAMACPP_TABLE}


@dataclass(frozen=True)
class LoggedMemory:
    """What an engine's log says it allocated at load (bytes; None: not in the log)."""

    weights_bytes: int | None = None
    kv_bytes: int | None = None
    compute_bytes: int | None = None
    kv_capacity_tokens: int | None = None
    max_concurrency: float | None = None


@dataclass(frozen=True)
class Breakdown:
    """Held memory (the samples) = weights + KV cache + other, each from the engine's own log."""

    held_bytes: int
    weights_bytes: int | None
    kv_bytes: int | None

    @property
    def other_bytes(self) -> int | None:
        if self.weights_bytes is None or self.kv_bytes is None:
            return None
        return self.held_bytes - self.weights_bytes - self.kv_bytes


def _value(raw: str) -> float:
    return float(raw.replace(",", ""))


def parse_log(text: str, table: tuple[Row, ...]) -> LoggedMemory:
    """The figures of one engine's log by its table. A summing row adds every line that matches
    (one per buffer); otherwise the first row of a kind that matches wins, in the table's order (so
    the exact launch-line bytes win over a rounded GiB only when listed first)."""
    found: dict[str, float] = {}
    for kind in dict.fromkeys(r.what for r in table):
        for row in (r for r in table if r.what == kind):
            hits = [_value(m.group(1)) * row.unit for m in row.pattern.finditer(text)]
            if hits:
                found[kind] = sum(hits) if row.sums else hits[-1]
                break

    def as_int(kind: str) -> int | None:
        return int(round(found[kind])) if kind in found else None

    return LoggedMemory(
        weights_bytes=as_int("weights"),
        kv_bytes=as_int("kv"),
        compute_bytes=as_int("compute"),
        kv_capacity_tokens=as_int("kv_tokens"),
        max_concurrency=found.get("concurrency"),
    )


def parse_vllm_log(text: str) -> LoggedMemory:
    # the exact bytes of the launch line before the GiB the worker rounds them to
    exact = tuple(r for r in VLLM_TABLE if r.unit == 1 and r.what == "kv")
    rest = tuple(r for r in VLLM_TABLE if r not in exact)
    return parse_log(text, exact + rest)


def parse_llamacpp_log(text: str) -> LoggedMemory:
    return parse_log(text, LLAMACPP_TABLE)


def parse_engine_log(kind: str, text: str) -> LoggedMemory:
    """The figures of a ``kind`` engine's log (an engine without a table: none)."""
    if kind == "vllm":
        return parse_vllm_log(text)
    table = TABLES.get(kind)
    return parse_log(text, table) if table else LoggedMemory()


def breakdown(held_bytes: int | None, logged: LoggedMemory) -> Breakdown | None:
    """The held figure split by the log's weights and KV; None without a held figure."""
    if held_bytes is None:
        return None
    return Breakdown(held_bytes, logged.weights_bytes, logged.kv_bytes)
