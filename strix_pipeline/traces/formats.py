"""Reading the trace formats people already have into :class:`Trace`.

- ``openai_log``: JSONL, one OpenAI-compatible ``/v1/chat/completions`` or ``/v1/completions`` request
  body a line, as a proxy writes them; the body is the line itself or its ``request``/``body`` key. Times
  from ``timestamp``/``startTime``/``created`` (epoch seconds or milliseconds, or ISO 8601), the serving
  time from ``endTime`` when present. Token counts from ``usage`` (the line's, or its ``response``'s)
  when logged, else estimated from the text; the output length is ``usage.completion_tokens``, else
  the request's ``max_tokens``/``max_completion_tokens``.
- ``vllm_custom``: vLLM's ``custom`` dataset, JSONL with ``prompt`` and optionally ``output_tokens``
  (default 256, ``vllm bench serve``'s ``--custom-output-len``).
- ``sharegpt``: a JSON array of ``{"conversations": [{"from", "value"}, ...]}``; as vLLM's ShareGPT
  dataset, the first turn is the prompt and the second the completion whose length is the output; a
  conversation of fewer than two turns is skipped (vLLM filters them too) and counted in the notes.
- ``azure``: the Azure LLM inference trace CSV, ``TIMESTAMP,ContextTokens,GeneratedTokens``.
- ``mooncake``: JSONL with ``timestamp`` (ms after the first request), ``input_length``,
  ``output_length`` and ``hash_ids`` (one id per 512-token block of the prompt's prefix; equal leading
  ids are a shared prefix).

Text is never kept: its length is estimated at ``CHARS_PER_TOKEN`` characters a token (English and
code through a BPE tokenizer are 3.5-4.5; within about 15 % of a real count) and its prefix blocks are a
sha256 chain over ``BLOCK_TOKENS * CHARS_PER_TOKEN``-character blocks, renumbered 0, 1, 2... in the
order first seen (so the stored ids say only which requests share a prefix, not what it was).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from strix_pipeline.traces.model import BLOCK_TOKENS, Trace, TraceError, TraceRequest

CHARS_PER_TOKEN = 4.0
DEFAULT_OUTPUT_TOKENS = 256  # vllm bench serve --custom-output-len
FORMATS = ("openai_log", "vllm_custom", "sharegpt", "azure", "mooncake")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class _Blocks:
    """Prefix blocks of texts: a sha256 chain over fixed-size character blocks, numbered as first seen."""

    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}

    def of(self, text: str, input_tokens: int) -> tuple[int, ...]:
        size = int(BLOCK_TOKENS * CHARS_PER_TOKEN)
        chain = b""
        out = []
        for start in range(0, len(text), size):
            chain = hashlib.sha256(chain + text[start : start + size].encode()).digest()
            out.append(self.ids.setdefault(chain, len(self.ids)))
        return tuple(out[: math.ceil(input_tokens / BLOCK_TOKENS)])


def estimate_tokens(text: str) -> int:
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def _count(obj: dict[str, Any], key: str, path: Path, line: int, *, required: bool = True) -> int | None:
    v = obj.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v) or v < 1:
        raise TraceError(path, line, key, f"must be a positive whole number of tokens, got {v!r}")
    return int(v)


def _jsonl(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise TraceError(path, i, None, f"not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise TraceError(path, i, None, f"each line must be a JSON object, got {type(obj).__name__}")
        yield i, obj


def _epoch_s(v: Any, path: Path, line: int, key: str) -> float:
    """Seconds since the epoch from epoch seconds, epoch milliseconds (> 1e11) or an ISO 8601 string."""
    if isinstance(v, bool):
        raise TraceError(path, line, key, f"not a time: {v!r}")
    if isinstance(v, int | float):
        return float(v) / 1000 if v > 1e11 else float(v)
    if isinstance(v, str):
        try:
            return _iso(v).timestamp()
        except ValueError:
            pass
    raise TraceError(path, line, key, f"not a time (epoch seconds or ms, or ISO 8601): {v!r}")


def _iso(text: str) -> datetime:
    """ISO 8601 with any number of fractional digits (Azure's traces write seven)."""
    text = text.strip()
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = head + "." + (rest[:digits] + "000000")[:6] + rest[digits:]
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _message_text(body: dict[str, Any], path: Path, line: int) -> str:
    if isinstance(body.get("prompt"), str):
        return body["prompt"]
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise TraceError(path, line, "messages", "a request body needs a non-empty messages list or a prompt")
    parts = []
    for k, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise TraceError(path, line, f"messages[{k}]", "each message must be an object")
        content = m.get("content")
        if isinstance(content, list):  # content parts: only the text ones have a length to replay
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content is not None and not isinstance(content, str):
            raise TraceError(path, line, f"messages[{k}].content", "must be text or a list of parts")
        parts.append(f"{m.get('role', '')}: {content or ''}\n")
    return "".join(parts)


def _usage(obj: dict[str, Any]) -> dict[str, Any]:
    for holder in (obj, obj.get("response")):
        if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
            return holder["usage"]
    return {}


def parse_openai_log(path: Path, text: str) -> Trace:
    blocks = _Blocks()
    rows = []
    estimated = False
    for i, obj in _jsonl(path, text):
        body = next((obj[k] for k in ("request", "body") if isinstance(obj.get(k), dict)), obj)
        prompt = _message_text(body, path, i)
        usage = _usage(obj)
        n_in = _count(usage, "prompt_tokens", path, i, required=False)
        if n_in is None:
            n_in, estimated = estimate_tokens(prompt), True
        n_out = _count(usage, "completion_tokens", path, i, required=False)
        for key in ("max_completion_tokens", "max_tokens"):
            if n_out is None:
                n_out = _count(body, key, path, i, required=False)
        if n_out is None:
            raise TraceError(
                path, i, "max_tokens", "no output length: log usage.completion_tokens or send max_tokens"
            )
        at_key = next((k for k in ("timestamp", "startTime", "created") if obj.get(k) is not None), None)
        start = _epoch_s(obj[at_key], path, i, at_key) if at_key else None
        end = _epoch_s(obj["endTime"], path, i, "endTime") if obj.get("endTime") is not None else None
        if end is not None and start is not None and end < start:
            raise TraceError(path, i, "endTime", "is before the request's start")
        duration = end - start if end is not None and start is not None else None
        rows.append((i, start, TraceRequest(None, n_in, n_out, blocks.of(prompt, n_in), duration)))
    return _trace(path, "openai_log", text, rows, estimated)


def parse_vllm_custom(path: Path, text: str) -> Trace:
    blocks = _Blocks()
    rows = []
    for i, obj in _jsonl(path, text):
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise TraceError(path, i, "prompt", "each line needs a non-empty prompt string")
        n_out = _count(obj, "output_tokens", path, i, required=False) or DEFAULT_OUTPUT_TOKENS
        n_in = estimate_tokens(prompt)
        rows.append((i, None, TraceRequest(None, n_in, n_out, blocks.of(prompt, n_in))))
    return _trace(path, "vllm_custom", text, rows, True)


def _array_items(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    """A JSON array's items with the line each starts on (a ShareGPT file is one array)."""
    dec = json.JSONDecoder()
    pos = len(text) - len(text.lstrip())
    if not text[pos : pos + 1] == "[":
        raise TraceError(path, 1, None, "a ShareGPT file is one JSON array")
    pos += 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            raise TraceError(path, text.count("\n") + 1, None, "the JSON array is not closed")
        if text[pos] == "]":
            return
        line = text.count("\n", 0, pos) + 1
        try:
            item, pos = dec.raw_decode(text, pos)
        except ValueError as e:
            raise TraceError(path, line, None, f"not JSON: {e}") from None
        yield line, item


def parse_sharegpt(path: Path, text: str) -> Trace:
    blocks = _Blocks()
    rows = []
    short = 0
    for line, item in _array_items(path, text):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise TraceError(path, line, "conversations", "each entry needs a conversations list")
        if len(turns) < 2:
            short += 1
            continue
        texts = []
        for k in (0, 1):
            t = turns[k]
            if not isinstance(t, dict) or not isinstance(t.get("value"), str):
                raise TraceError(path, line, f"conversations[{k}].value", "each turn needs a value string")
            texts.append(t["value"])
        n_in = estimate_tokens(texts[0])
        rows.append(
            (line, None, TraceRequest(None, n_in, estimate_tokens(texts[1]), blocks.of(texts[0], n_in)))
        )
    notes = (f"{short} conversation(s) with fewer than two turns skipped, as vLLM does",) if short else ()
    return _trace(path, "sharegpt", text, rows, True, notes)


def parse_azure(path: Path, text: str) -> Trace:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or ()]
    missing = [c for c in AZURE_COLUMNS if c not in header]
    if missing:
        raise TraceError(path, 1, missing[0], f"the header needs the columns {', '.join(AZURE_COLUMNS)}")
    rows = []
    for rec in reader:
        i = reader.line_num
        rec = {(k or "").strip(): v for k, v in rec.items()}
        try:
            at = _iso(rec["TIMESTAMP"] or "").timestamp()
        except ValueError:
            raise TraceError(path, i, "TIMESTAMP", f"not a date and time: {rec['TIMESTAMP']!r}") from None
        counts = {}
        for key in ("ContextTokens", "GeneratedTokens"):
            try:
                counts[key] = int((rec[key] or "").strip())
            except ValueError:
                counts[key] = rec[key]
            _count(counts, key, path, i)
        rows.append((i, at, TraceRequest(None, counts["ContextTokens"], counts["GeneratedTokens"])))
    return _trace(path, "azure", text, rows, False)


def parse_mooncake(path: Path, text: str) -> Trace:
    rows = []
    for i, obj in _jsonl(path, text):
        n_in = _count(obj, "input_length", path, i)
        n_out = _count(obj, "output_length", path, i)
        assert n_in is not None and n_out is not None
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or any(
            isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in ids
        ):
            raise TraceError(path, i, "hash_ids", "must be a list of non-negative integers")
        if len(ids) > math.ceil(n_in / BLOCK_TOKENS):
            raise TraceError(
                path,
                i,
                "hash_ids",
                f"{len(ids)} blocks of {BLOCK_TOKENS} tokens are more than input_length {n_in}",
            )
        at = obj.get("timestamp")
        if at is not None and (isinstance(at, bool) or not isinstance(at, int | float) or at < 0):
            raise TraceError(path, i, "timestamp", f"must be milliseconds >= 0, got {at!r}")
        rows.append((i, at / 1000 if at is not None else None, TraceRequest(None, n_in, n_out, tuple(ids))))
    return _trace(path, "mooncake", text, rows, False)


def _trace(
    path: Path,
    fmt: str,
    text: str,
    rows: list[tuple[int, float | None, TraceRequest]],
    estimated: bool,
    notes: tuple[str, ...] = (),
) -> Trace:
    """Requests in arrival order with offsets from the first; all timed or none (a file that times some
    lines and not others is refused at the first line that differs)."""
    if not rows:
        raise TraceError(path, None, None, f"no requests in this {fmt} file")
    timed = rows[0][1] is not None
    for line, at, _ in rows:
        if (at is not None) != timed:
            raise TraceError(path, line, "timestamp", "some lines have a time and others none")
    reqs = [r for _, _, r in rows]
    if timed:
        first = min(at for _, at, _ in rows if at is not None)
        ordered = sorted(rows, key=lambda row: row[1] or 0.0)
        reqs = [
            TraceRequest(at - first, r.input_tokens, r.output_tokens, r.prefix_blocks, r.duration_s)
            for _, at, r in ordered
            if at is not None
        ]
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return Trace(fmt, digest, tuple(reqs), estimated, BLOCK_TOKENS, notes)


PARSERS: dict[str, Callable[[Path, str], Trace]] = {
    "openai_log": parse_openai_log,
    "vllm_custom": parse_vllm_custom,
    "sharegpt": parse_sharegpt,
    "azure": parse_azure,
    "mooncake": parse_mooncake,
}


def detect_format(path: Path, text: str) -> str:
    """The format a file is in, from its first record; a TraceError when none fits."""
    head = text.lstrip()
    if head.startswith("["):
        return "sharegpt"
    first = head.splitlines()[0] if head else ""
    if all(c in first for c in AZURE_COLUMNS):
        return "azure"
    try:
        obj = json.loads(first)
    except ValueError:
        raise TraceError(path, 1, None, f"not a trace in a known format ({', '.join(FORMATS)})") from None
    if isinstance(obj, dict):
        if "input_length" in obj or "hash_ids" in obj:
            return "mooncake"
        if any(k in obj for k in ("messages", "request", "body", "model")):
            return "openai_log"
        if "prompt" in obj:
            return "vllm_custom"
    raise TraceError(path, 1, None, f"not a trace in a known format ({', '.join(FORMATS)})")


def read_trace(path: str | Path, fmt: str = "auto") -> Trace:
    """Parse ``path`` as ``fmt`` (or the format its first record shows); TraceError on any bad line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(path, None, None, f"not UTF-8 text: {e}") from None
    except OSError as e:
        raise TraceError(path, None, None, f"cannot read: {e.strerror or e}") from None
    if fmt == "auto":
        fmt = detect_format(path, text)
    if fmt not in PARSERS:
        raise TraceError(path, None, None, f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    return PARSERS[fmt](path, text)
