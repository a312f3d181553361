"""Workloads: deterministic from the seed, exact lengths through the server tokenizer, dataset files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.synthetic_server import SyntheticServer

from strix_pipeline.loadgen.client import make_session
from strix_pipeline.loadgen.workloads import ServerTokenizer, Workload, load_corpus, load_dataset


async def prompts(seed: int, with_server: bool) -> list[tuple[str, int | None]]:
    async with SyntheticServer() as srv, make_session() as session:
        tok = ServerTokenizer(session, srv.base_url if with_server else "http://127.0.0.1:9", "m")
        wl = Workload(tok, seed)
        await wl.prepare(2048)
        out = []
        for n in (100, 777, 2048):
            p = await wl.code_prompt(n, 8)
            out.append((p.text, p.measured_tokens))
        return out


def test_exact_lengths_with_the_server_tokenizer() -> None:
    got = asyncio.run(prompts(1, True))
    # The synthetic server's tokenizer is one token per character.
    assert [len(t) for t, _ in got] == [100, 777, 2048]
    assert [m for _, m in got] == [100, 777, 2048]


def test_deterministic_from_the_seed_and_distinct_prompts() -> None:
    a, b, c = asyncio.run(prompts(1, True)), asyncio.run(prompts(1, True)), asyncio.run(prompts(2, True))
    assert a == b and a != c
    assert len({t[:20] for t, _ in a}) == 3  # unique heads: no accidental prefix-cache hits


def test_estimated_lengths_without_a_tokenizer() -> None:
    got = asyncio.run(prompts(1, False))
    assert all(m is None for _, m in got)
    assert 0.5 < len(got[2][0]) / (2048 * 3.6) < 1.5


def test_corpus_is_python_source() -> None:
    c = load_corpus(10_000)
    assert len(c) >= 10_000 and "def " in c


def test_dataset_file(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text(
        '{"prompt": "hello", "output_tokens_count": 12}\n\n{"prompt": "bye", "prompt_tokens_count": 3}\n'
    )
    ps = load_dataset(f, default_output_tokens=5)
    assert [(p.text, p.output_tokens, p.target_tokens) for p in ps] == [("hello", 12, None), ("bye", 5, 3)]
    f.write_text('{"text": "no prompt key"}\n')
    with pytest.raises(ValueError, match="d.jsonl:1"):
        load_dataset(f)
