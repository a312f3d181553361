"""Each trace format the project ships a sample of imports into the one model; a malformed line is
refused naming the file, its line and the field; text never reaches what is stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.paths import REPO

from strix_pipeline.traces.formats import read_trace
from strix_pipeline.traces.model import TraceError
from strix_pipeline.traces.store import load_trace, save_trace
from strix_pipeline.traces.summary import summarise

FIXTURES = REPO / "tests" / "fixtures" / "traces"
SAMPLES = {
    "openai_log.jsonl": ("openai_log", 30, True),
    "vllm_custom.jsonl": ("vllm_custom", 30, False),
    "sharegpt.json": ("sharegpt", 29, False),
    "azure.csv": ("azure", 30, True),
    "mooncake.jsonl": ("mooncake", 30, True),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_sample_imports_by_its_detected_format(name: str) -> None:
    fmt, n, timed = SAMPLES[name]
    trace = read_trace(FIXTURES / name)
    assert trace.format == fmt
    assert len(trace.requests) == n
    assert trace.has_arrivals is timed
    assert all(r.input_tokens > 0 and r.output_tokens > 0 for r in trace.requests)
    if timed:
        offsets = [r.arrival_s for r in trace.requests]
        assert offsets[0] == 0 and offsets == sorted(offsets)
    assert trace.source_digest.startswith("sha256:")


def test_mooncake_keeps_lengths_times_and_blocks_as_written() -> None:
    first = json.loads((FIXTURES / "mooncake.jsonl").read_text().splitlines()[0])
    r = read_trace(FIXTURES / "mooncake.jsonl", "mooncake").requests[0]
    assert (r.input_tokens, r.output_tokens, list(r.prefix_blocks)) == (
        first["input_length"],
        first["output_length"],
        first["hash_ids"],
    )
    assert r.arrival_s == 0.0


def test_azure_times_are_seconds_after_the_first() -> None:
    trace = read_trace(FIXTURES / "azure.csv")
    # the sample's first two rows are 43.8209 ms apart (seven fractional digits, the last one dropped)
    assert trace.requests[1].arrival_s == pytest.approx(0.043821, abs=1e-6)
    assert (trace.requests[0].input_tokens, trace.requests[0].output_tokens) == (2239, 241)


def test_openai_log_takes_logged_usage_and_shares_the_system_prompt() -> None:
    trace = read_trace(FIXTURES / "openai_log.jsonl")
    logged = trace.requests[1]  # odd lines log usage: exact counts, not estimates
    assert (logged.input_tokens, logged.output_tokens) == (801, 21)
    assert trace.requests[0].output_tokens in (16, 32, 64)  # max_tokens when no usage was logged
    # every request starts with the same system prompt: the same first block id
    assert {r.prefix_blocks[0] for r in trace.requests} == {0}
    s = summarise(trace)
    assert s.prefix_reuse > 0.5
    assert s.concurrency_peak is not None and s.concurrency_mean is not None  # startTime + endTime


def test_sharegpt_skips_single_turn_conversations_and_says_so() -> None:
    trace = read_trace(FIXTURES / "sharegpt.json")
    assert trace.notes == ("1 conversation(s) with fewer than two turns skipped, as vLLM does",)


def bad(tmp_path: Path, name: str, text: str) -> TraceError:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TraceError) as e:
        read_trace(p)
    assert str(p) in str(e.value)
    return e.value


@pytest.mark.parametrize(
    ("name", "text", "line", "field"),
    [
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}\n'
            '{"timestamp": 10, "input_length": -3, "output_length": 4, "hash_ids": [0]}\n',
            2,
            "input_length",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}\n\n'
            '{"timestamp": 5, "input_length": 100, "output_length": 4, "hash_ids": [0, 1, 2]}\n',
            3,
            "hash_ids",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 4}\n'
            '{"input_length": 600, "output_length": 4}\n',
            2,
            "timestamp",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,2\nyesterday,10,2\n",
            3,
            "TIMESTAMP",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,ten,2\n",
            2,
            "ContextTokens",
        ),
        ("c.jsonl", '{"prompt": "hello"}\n{"prompt": "hi", "output_tokens": 2.5}\n', 2, "output_tokens"),
        ("c.jsonl", '{"prompt": "hello"}\n{"prompt": ""}\n', 2, "prompt"),
        (
            "o.jsonl",
            '{"model": "m", "messages": [{"role": "user", "content": "a"}], "max_tokens": 8}\n'
            '{"model": "m", "messages": [{"role": "user", "content": "b"}]}\n',
            2,
            "max_tokens",
        ),
        (
            "o.jsonl",
            '{"model": "m", "messages": [{"role": "user", "content": "a"}], "max_tokens": 8}\n{oops\n',
            2,
            None,
        ),
        (
            "s.json",
            '[\n {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]},\n'
            ' {"conversations": [{"from": "human"}, {"from": "gpt", "value": "b"}]}\n]\n',
            3,
            "conversations[0].value",
        ),
    ],
)
def test_a_malformed_line_is_refused_with_its_number_and_field(
    tmp_path: Path, name: str, text: str, line: int, field: str | None
) -> None:
    e = bad(tmp_path, name, text)
    assert (e.line, e.field) == (line, field)
    assert f":{line}:" in str(e)


def test_an_unknown_format_is_refused(tmp_path: Path) -> None:
    e = bad(tmp_path, "x.jsonl", '{"what": 1}\n')
    assert "not a trace in a known format" in str(e)


def test_the_stored_trace_keeps_no_text_and_reads_back_equal(tmp_path: Path) -> None:
    trace = read_trace(FIXTURES / "openai_log.jsonl")
    stored = save_trace(tmp_path, "mine", trace)
    data = stored.path.read_text()
    assert "careful code reviewer" not in data and "reviewer" not in data
    back, digest = load_trace(tmp_path, "mine")
    assert back == trace
    assert digest == stored.content_digest


def test_a_trace_never_imported_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no trace named 'nope'"):
        load_trace(tmp_path, "nope")
