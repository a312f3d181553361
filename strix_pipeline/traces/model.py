"""One typed model of a recorded request, whatever file it came from, and the error a bad line raises.

A trace keeps lengths, arrival offsets and which prefix blocks requests share -- never text: a file
that carries prompts (a proxy's request log, ShareGPT, vLLM's ``custom`` JSONL) is reduced to the
token counts and a hash chain of its prefix blocks as it is read, so nothing a user wrote is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Mooncake's block: every ``hash_ids`` entry stands for this many tokens of the prompt's prefix.
BLOCK_TOKENS = 512


class TraceError(ValueError):
    """A trace file that cannot be read as it claims to be: names the file, the line and the field."""

    def __init__(self, path: str | Path, line: int | None, field_name: str | None, why: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        what = f" field {field_name!r}:" if field_name else ""
        super().__init__(f"{where}:{what} {why}")
        self.path, self.line, self.field, self.why = str(path), line, field_name, why


@dataclass(frozen=True)
class TraceRequest:
    """One recorded request: when it arrived (seconds after the trace's first, None when the file has no
    times), its input and output token counts, the ids of the ``BLOCK_TOKENS``-token prefix blocks it
    starts with (two requests sharing the first k ids share that prefix), and how long it was served
    when the file says (what the recorded concurrency is computed from)."""

    arrival_s: float | None
    input_tokens: int
    output_tokens: int
    prefix_blocks: tuple[int, ...] = ()
    duration_s: float | None = None


@dataclass(frozen=True)
class Trace:
    """A parsed trace: its requests in arrival order (file order when it has no times), the format it was
    read as, the sha256 of the file's bytes, and whether token counts were estimated from text."""

    format: str
    source_digest: str
    requests: tuple[TraceRequest, ...]
    lengths_estimated: bool = False
    block_tokens: int = BLOCK_TOKENS
    notes: tuple[str, ...] = field(default=())

    @property
    def has_arrivals(self) -> bool:
        return bool(self.requests) and all(r.arrival_s is not None for r in self.requests)
