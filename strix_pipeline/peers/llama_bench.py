"""``llama-bench -o json`` (one array) and ``-o jsonl`` (one object a line): one file, one run.

Each test row becomes one level, named as llama-bench's own table names it: a prompt-processing test
(``n_gen`` 0) is scenario ``pp<n_prompt>``, a generation test (``n_prompt`` 0) ``tg<n_gen>``, a mixed
one ``pp<n_prompt>+tg<n_gen>``; the level is the test's ``n_depth`` (tokens already in the context,
``-d``), of kind ``depth``. ``avg_ts`` -- the ``t/s`` column llama-bench prints -- is
``prefill_tokens_per_s`` of a pp test and ``decode_tokens_per_s`` and ``output_tokens_per_s`` of a tg
test (one sequence: decode rate and output rate are one number); ``avg_ns`` is ``e2e_mean_ms``. A
mixed test's t/s counts prompt and generated tokens together: it is kept as ``e2e_mean_ms`` only.
llama-bench measures no TTFT. ``requests_ok`` is the test's repetitions (``samples_ns``).

The engine is llama.cpp itself (``engine_kind`` ``llamacpp``); the tool version is
``b<build_number>-<build_commit>`` unless the build knows neither (a build from a source archive says
``0``/``unknown``): then ``--tool-version`` must say which llama.cpp it is. The settings that shape
the numbers (threads, batch sizes, KV types, offload, flash attention, ...) are the run's
``engine_flags`` -- comparability fields -- in llama-bench's own flag spelling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from strix_pipeline.peers.common import (
    Field,
    ImportOptions,
    PeerFormatError,
    parse_json,
    parse_time,
    peer_result,
    read_text,
)
from strix_pipeline.records import LevelAggregate, RunResult

TOOL = "llama-bench"
# the fields of a row that must agree across one file (one build, one model, one configuration)
_RUN_FIELDS = ("build_commit", "build_number", "model_filename", "model_type")
# llama-bench's settings that shape the numbers -> its flag for them (engine_flags)
_FLAGS = {
    "n_threads": "-t",
    "n_batch": "-b",
    "n_ubatch": "-ub",
    "type_k": "-ctk",
    "type_v": "-ctv",
    "n_gpu_layers": "-ngl",
    "n_cpu_moe": "-ncmoe",
    "split_mode": "-sm",
    "no_kv_offload": "-nkvo",
    "flash_attn": "-fa",
    "cpu_strict": "--cpu-strict",
    "poll": "--poll",
    "embeddings": "-embd",
    "no_op_offload": "-nopo",
    "repack": "--repack",
}
_ROW_KEYS = ("n_prompt", "n_gen", "n_depth", "avg_ns", "avg_ts", "test_time", "build_commit", "build_number")


def _is_row(v: Any) -> bool:
    return isinstance(v, Mapping) and all(k in v for k in ("n_prompt", "n_gen", "avg_ts", "build_commit"))


def detect(doc: Any) -> bool:
    if isinstance(doc, list):
        return bool(doc) and _is_row(doc[0])
    return _is_row(doc)  # the first line of a JSONL file


def read_rows(path: Path) -> tuple[list[Any], str]:
    """The rows of a ``-o json`` array or a ``-o jsonl`` file, and how each row is named ($[i] / line N)."""
    text = read_text(path)
    try:
        doc = parse_json(path, text)
    except PeerFormatError as e:
        if "not JSON" not in e.problem:
            raise
        rows: list[Any] = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                rows.append(parse_json(path, line, f"line {n}"))
        return rows, "line"
    if isinstance(doc, Mapping):  # a JSONL file of one line
        return [doc], "line"
    if not isinstance(doc, list):
        raise PeerFormatError(path, "$", "expected llama-bench's array of test rows")
    return doc, "$"


def load(path: Path, opts: ImportOptions) -> RunResult:
    rows, style = read_rows(path)
    f = Field(path)
    if not rows:
        raise f.fail("$", "no llama-bench test rows")

    def where(i: int) -> str:
        return f"$[{i}]" if style == "$" else f"line {i + 1}"

    first: Mapping[str, Any] | None = None
    aggs: list[LevelAggregate] = []
    times: list[datetime] = []
    for i, row in enumerate(rows):
        w = where(i)
        if not isinstance(row, Mapping):
            raise f.fail(w, "expected a llama-bench test row (an object)")
        for k in _ROW_KEYS:
            f.get(row, k, w)
        if first is None:
            first = row
        for k in (*_RUN_FIELDS, *_FLAGS):
            if row.get(k) != first.get(k):
                raise f.fail(
                    f"{w}.{k}",
                    f"{row.get(k)!r} differs from the first row's {first.get(k)!r}: "
                    "one file must be one build, model and configuration",
                )
        n_prompt = f.count(row, "n_prompt", w)
        n_gen = f.count(row, "n_gen", w)
        depth = f.count(row, "n_depth", w)
        avg_ts = f.req_num(row, "avg_ts", w)
        avg_ns = f.req_num(row, "avg_ns", w)
        samples = row.get("samples_ns")
        reps = len(samples) if isinstance(samples, list) else 1
        if n_prompt and not n_gen:
            scenario, rate = f"pp{n_prompt}", {"prefill_tokens_per_s": avg_ts}
        elif n_gen and not n_prompt:
            scenario, rate = f"tg{n_gen}", {"decode_tokens_per_s": avg_ts, "output_tokens_per_s": avg_ts}
        elif n_gen and n_prompt:
            scenario, rate = f"pp{n_prompt}+tg{n_gen}", {}
        else:
            raise f.fail(f"{w}.n_prompt", "a test of 0 prompt and 0 generated tokens")
        if any((a.scenario, a.level) == (scenario, depth) for a in aggs):
            raise f.fail(f"{w}.n_depth", f"a second {scenario} test at depth {depth}")
        agg = LevelAggregate(
            run_id="",
            scenario=scenario,
            level=depth,
            level_kind="depth",
            requests_ok=reps,
            requests_failed=0,
            duration_s=avg_ns * reps / 1e9,
            e2e_mean_ms=avg_ns / 1e6,
            input_tokens_mean=float(n_prompt),
            output_tokens_total=n_gen * reps,
            **rate,
        )
        aggs.append(agg)
        times.append(parse_time(f, row["test_time"], f"{w}.test_time"))
    assert first is not None
    version = opts.tool_version or _version(f, first, where(0))
    model_file = f.req_text(first, "model_filename", where(0))
    return peer_result(
        path,
        tool=TOOL,
        version=version,
        opts=opts,
        model=Path(model_file).name,
        quantization=_quantization(first),
        engine="llamacpp",
        started_at=min(times),
        ended_at=max(times),
        aggregates=aggs,
        engine_flags=_engine_flags(first),
        engine_build=f"b{first.get('build_number')}-{first.get('build_commit')}",
        command="llama-bench",
    )


def _version(f: Field, row: Mapping[str, Any], w: str) -> str:
    commit = f.req_text(row, "build_commit", w)
    number = f.count(row, "build_number", w)
    if number == 0 and commit in ("", "unknown"):
        raise f.fail(
            f"{w}.build_commit",
            "this llama-bench does not know its build (0, 'unknown'): give --tool-version "
            "(e.g. the llama.cpp release or package version it was built from)",
        )
    return f"b{number}-{commit}"


def _quantization(row: Mapping[str, Any]) -> str | None:
    # model_type reads "gemma3 270M Q4_K - Medium": the quantization is what follows the size
    t = row.get("model_type")
    if not isinstance(t, str):
        return None
    parts = t.split(" ", 2)
    return (
        parts[2].replace(" - Medium", "_M").replace(" - Small", "_S").replace(" - Large", "_L")
        if len(parts) == 3
        else None
    )


def _engine_flags(row: Mapping[str, Any]) -> Sequence[str]:
    out: list[str] = []
    for key, flag in _FLAGS.items():
        if key in row:
            v = row[key]
            out += [flag, str(int(v)) if isinstance(v, bool) else str(v)]
    return out
