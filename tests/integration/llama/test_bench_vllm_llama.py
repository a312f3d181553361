"""`strix bench` speaks `vllm bench serve` against the real embedded llama-server: the line runs unchanged
and the result JSON has every key vLLM writes (the keys come from vLLM's source: tests/support/vllm_keys.py).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from support.bench_cli import bench
from support.vllm_keys import VLLM_RESULT_KEYS, VLLM_SETUP_KEYS, VLLM_TRAFFIC_KEYS, vllm_metric_keys

pytestmark = [pytest.mark.llama, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIX_CONFIG", str(tmp_path / "absent.toml"))


def test_the_same_line_runs_unchanged_against_the_embedded_llama_server(llama_server, tmp_path: Path) -> None:
    """The done-when of the issue: a `vllm bench serve` command line with these flags, unchanged,
    against the real embedded llama-server, writes every key vLLM writes for the same flags."""
    line = (
        f"vllm bench serve --backend openai-chat --base-url {llama_server.base_url} "
        f"--endpoint /v1/chat/completions --model {llama_server.model} --tokenizer google/gemma-3-270m "
        "--dataset-name random --random-input-len 32 --random-output-len 8 --num-prompts 6 "
        "--max-concurrency 2 --request-rate 50 --num-warmups 1 --seed 3 --ignore-eos "
        "--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 "
        "--goodput ttft:5000 tpot:500 e2el:60000 --metadata box=local "
        f"--save-result --result-dir {tmp_path} --result-filename llama.json"
    )
    words = shlex.split(line)
    assert bench(words[3:]) == 0
    doc = json.loads((tmp_path / "llama.json").read_text())
    expected = (
        VLLM_SETUP_KEYS
        + ["box"]
        + VLLM_TRAFFIC_KEYS
        + VLLM_RESULT_KEYS
        + vllm_metric_keys(["ttft", "tpot", "itl", "e2el"], ["50", "99"])
    )
    assert list(doc) == expected
    assert doc["completed"] == 6 and doc["failed"] == 0 and doc["total_output_tokens"] == 6 * 8
    assert 0 < doc["p50_ttft_ms"] <= doc["p99_ttft_ms"] < doc["p99_e2el_ms"]
