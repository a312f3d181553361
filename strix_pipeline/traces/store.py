"""Where an imported trace lives so a run can replay it: ``<artifacts>/traces/<name>.jsonl``.

The file is the trace normalised -- a header line (format, the source file's digest, block size),
then one line per request with its arrival offset, lengths, prefix block ids and serving time -- and
nothing else: no text, so it can sit beside the charts and be copied to the Box. A profile names the
trace (``trace.name``); its content digest (sha256 of this file) is what the warehouse's ``traces``
row records, so a run can be traced back to the exact requests it replayed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from strix_pipeline.paths import inside
from strix_pipeline.safe_write import write_file
from strix_pipeline.traces.model import Trace, TraceError, TraceRequest

FORMAT_VERSION = 1


def trace_path(folder: Path, name: str) -> Path:
    return inside(folder, f"{name}.jsonl")


def encode(trace: Trace) -> bytes:
    head = {
        "strix_trace": FORMAT_VERSION,
        "format": trace.format,
        "source_digest": trace.source_digest,
        "block_tokens": trace.block_tokens,
        "lengths_estimated": trace.lengths_estimated,
        "notes": list(trace.notes),
    }
    lines = [json.dumps(head, sort_keys=True)]
    for r in trace.requests:
        row = {
            "t": r.arrival_s,
            "in": r.input_tokens,
            "out": r.output_tokens,
            "blocks": list(r.prefix_blocks),
        }
        if r.duration_s is not None:
            row["dur"] = r.duration_s
        lines.append(json.dumps(row, sort_keys=True))
    return ("\n".join(lines) + "\n").encode()


@dataclass(frozen=True)
class Stored:
    path: Path
    content_digest: str


def save_trace(folder: Path, name: str, trace: Trace) -> Stored:
    """Write (or replace) the trace ``name``; its path and the sha256 of what was written."""
    data = encode(trace)
    path = write_file(trace_path(folder, name), lambda f: f.write(data), create_folder=True)
    return Stored(path, "sha256:" + hashlib.sha256(data).hexdigest())


def stored_digest(folder: Path, name: str) -> str | None:
    """The content digest of the trace ``name`` as stored now, None when it was never imported."""
    try:
        return "sha256:" + hashlib.sha256(trace_path(folder, name).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def load_trace(folder: Path, name: str) -> tuple[Trace, str]:
    """The trace ``name`` as imported, and its content digest; TraceError when it was never imported."""
    path = trace_path(folder, name)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(
            path,
            None,
            None,
            f"no trace named {name!r} imported here (strix workload import FILE --name {name})",
        ) from None
    lines = data.decode().splitlines()
    try:
        head = json.loads(lines[0])
        version = head.get("strix_trace")
        reqs = []
        for line in lines[1:]:
            row = json.loads(line)
            reqs.append(TraceRequest(row["t"], row["in"], row["out"], tuple(row["blocks"]), row.get("dur")))
    except (ValueError, KeyError, IndexError) as e:
        raise TraceError(path, None, None, f"damaged trace file ({e}); import it again") from None
    if version != FORMAT_VERSION:
        raise TraceError(
            path, 1, "strix_trace", f"not a trace file of version {FORMAT_VERSION}: import it again"
        )
    trace = Trace(
        head["format"],
        head["source_digest"],
        tuple(reqs),
        head["lengths_estimated"],
        head["block_tokens"],
        tuple(head["notes"]),
    )
    return trace, "sha256:" + hashlib.sha256(data).hexdigest()
