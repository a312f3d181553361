"""`strix bench` speaks `vllm bench serve`: its flags run unchanged and its result JSON has vLLM's keys.

The expected keys are written out from vLLM's own source in tests/support/vllm_keys.py, not from strix's
writer, so the two are checked against each other: vllm-project/vllm ``vllm/benchmarks/serve.py``
(``main_async``: the setup, ``--metadata`` and traffic keys, then ``benchmark()``'s result dict less the
per-request lists that only ``--save-detailed`` keeps; ``process_one_metric``:
mean_/median_/std_/p<N>_<metric>_ms for each ``--percentile-metrics`` name at each ``--metric-percentiles``
value, client_queue_time only with ``--max-concurrency``, e2el_including_client_queue only with it and a
finite ``--request-rate``; ``compute_result_filename``: the default file name). The same line against the real
llama-server is in tests/integration/llama/test_bench_vllm_llama.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import shlex
from pathlib import Path

import pytest
from support.bench_cli import bench
from support.synthetic_server import SyntheticServer
from support.vllm_keys import VLLM_RESULT_KEYS, VLLM_SETUP_KEYS, VLLM_TRAFFIC_KEYS, vllm_metric_keys

from strix_pipeline.cli import bench as cli_bench
from strix_pipeline.config import ConfigError
from strix_pipeline.loadgen import vllm_flags
from strix_pipeline.loadgen.metrics import percentile_key, value_stats
from strix_pipeline.loadgen.vllm_result import VllmOptions, result_filename, vllm_result
from strix_pipeline.loadgen.workloads import random_lengths
from strix_pipeline.records import LevelAggregate, RequestRecord


def run_against_server(line: str, **server: float) -> int:
    """Run a `vllm bench serve ...` line as `strix bench ...`, {url} filled with the server's root."""

    async def go() -> int:
        async with SyntheticServer(**server) as srv:  # type: ignore[arg-type]
            words = shlex.split(line.format(url=srv.base_url))
            assert words[:3] == ["vllm", "bench", "serve"]
            return await asyncio.to_thread(bench, words[3:])

    return asyncio.run(go())


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIX_CONFIG", str(tmp_path / "absent.toml"))


def test_a_vllm_bench_serve_line_runs_unchanged_and_writes_every_vllm_key(tmp_path: Path) -> None:
    line = (
        "vllm bench serve --backend openai-chat --base-url {url} --endpoint /v1/chat/completions "
        "--model synthetic --tokenizer Qwen/Qwen3-0.6B --dataset-name random --random-input-len 64 "
        "--random-output-len 8 --num-prompts 12 --max-concurrency 3 --request-rate 100 --num-warmups 2 "
        "--seed 7 --ignore-eos --percentile-metrics ttft,tpot,itl,e2el,client_queue_time,"
        "e2el_including_client_queue --metric-percentiles 50,90,99,99.9 "
        "--goodput ttft:1000 tpot:100 e2el:5000 --metadata tp=1 box=strix-halo "
        f"--save-result --result-dir {tmp_path / 'results'} --result-filename run.json"
    )
    assert run_against_server(line, ttft_ms=3, itl_ms=1) == 0

    doc = json.loads((tmp_path / "results" / "run.json").read_text())
    metrics = ["ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue"]
    expected = (
        VLLM_SETUP_KEYS
        + ["tp", "box"]
        + VLLM_TRAFFIC_KEYS
        + VLLM_RESULT_KEYS
        + vllm_metric_keys(metrics, ["50", "90", "99", "99.9"])
    )
    assert list(doc) == expected  # every key vLLM writes for these flags, in vLLM's order, no other

    assert doc["backend"] == doc["endpoint_type"] == "openai-chat" and doc["label"] is None
    assert doc["model_id"] == "synthetic" and doc["tokenizer_id"] == "Qwen/Qwen3-0.6B"
    assert doc["tp"] == "1" and doc["box"] == "strix-halo"
    assert doc["request_rate"] == 100.0 and doc["burstiness"] == 1.0 and doc["max_concurrency"] == 3
    assert re.fullmatch(r"\d{8}-\d{6}", doc["date"])

    # values consistent with each other
    assert doc["num_prompts"] == 12 and doc["completed"] + doc["failed"] == 12 and doc["failed"] == 0
    dur = doc["duration"]
    assert dur > 0
    assert doc["request_throughput"] == pytest.approx(doc["completed"] / dur)
    assert doc["output_throughput"] == pytest.approx(doc["total_output_tokens"] / dur)
    assert doc["total_token_throughput"] == pytest.approx(
        (doc["total_input_tokens"] + doc["total_output_tokens"]) / dur
    )
    assert doc["total_output_tokens"] == 12 * 8  # ignore_eos: every request ran to its length
    assert doc["total_input_tokens"] >= 12 * 64
    assert 0 < doc["request_goodput"] <= doc["request_throughput"]
    assert len(doc["latencies"]) == len(doc["queue_times"]) == 12
    assert doc["mean_e2el_ms"] == pytest.approx(1000 * sum(doc["latencies"]) / 12)
    assert 1 <= doc["max_concurrent_requests"] <= 3  # --max-concurrency held
    assert 0 < doc["max_output_tokens_per_s"] <= doc["total_output_tokens"]
    for m in metrics:
        assert doc[f"median_{m}_ms"] == pytest.approx(doc[f"p50_{m}_ms"])
        assert doc[f"p50_{m}_ms"] <= doc[f"p90_{m}_ms"] <= doc[f"p99_{m}_ms"] <= doc[f"p99.9_{m}_ms"]
        assert doc[f"std_{m}_ms"] >= 0
    assert doc["mean_ttft_ms"] < doc["mean_e2el_ms"] <= doc["mean_e2el_including_client_queue_ms"]

    # strix's own JSON beside it: std/min/max/count per metric and the total token throughput
    own = json.loads((tmp_path / "results" / "run.strix.json").read_text())
    assert own["metadata"] == {"tp": "1", "box": "strix-halo"}
    assert (
        own["vllm_compat"]["backend"] == "openai-chat"
        and own["vllm_compat"]["tokenizer"] == "Qwen/Qwen3-0.6B"
    )
    assert own["slo"] == {"ttft_ms": 1000.0, "tpot_ms": 100.0, "e2e_ms": 5000.0}
    (level,) = own["scenarios"]["random"]["levels"]
    assert level["level_kind"] == "rate" and level["requests_ok"] == 12
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "itl_per_token_ms", "e2e_ms", "queue_ms"):
        assert {"count", "std", "min", "max"} <= set(level[key])
        assert level[key]["min"] <= level[key]["mean"] <= level[key]["max"]
    assert level["ttft_ms"]["count"] == level["e2e_ms"]["count"] == 12
    assert level["itl_ms"]["count"] == 12 * 7  # 8 one-token events a request: 7 gaps
    assert level["ttft_ms"]["std"] == pytest.approx(doc["std_ttft_ms"])
    assert level["total_tokens_per_s"] == pytest.approx(doc["total_token_throughput"])
    assert level["input_tokens_total"] == doc["total_input_tokens"]


def test_vllm_defaults_completions_backend_and_the_default_file_name(tmp_path: Path) -> None:
    line = (
        "vllm bench serve --base-url {url} --model org/synthetic --served-model-name synthetic "
        "--random-input-len 32 --random-output-len 4 --num-prompts 5 --max-concurrency 2 "
        f"--save-result --result-dir {tmp_path}"
    )
    assert run_against_server(line, ttft_ms=2, itl_ms=0) == 0
    (path,) = [p for p in tmp_path.glob("*.json") if not p.name.endswith(".strix.json")]
    # compute_result_filename: {label or backend}-{request_rate}qps-concurrency{N}-{model basename}-{date}
    assert re.fullmatch(r"openai-infqps-concurrency2-synthetic-\d{8}-\d{6}\.json", path.name)
    assert (tmp_path / (path.stem + ".strix.json")).is_file()
    doc = json.loads(path.read_text())
    # default --percentile-metrics ttft,tpot,itl at the default --metric-percentiles 99; no --metadata;
    # no client_queue_time (not selected) although --max-concurrency is set
    expected = (
        VLLM_SETUP_KEYS
        + VLLM_TRAFFIC_KEYS
        + VLLM_RESULT_KEYS
        + vllm_metric_keys(["ttft", "tpot", "itl"], ["99"])
    )
    assert list(doc) == expected
    assert doc["request_goodput"] is None  # vLLM: null without --goodput
    assert doc["request_rate"] == "inf" and doc["max_concurrency"] == 2 and doc["backend"] == "openai"
    assert doc["model_id"] == doc["tokenizer_id"] == "org/synthetic"
    assert doc["completed"] == 5 and doc["failed"] == 0 and doc["total_output_tokens"] == 20


def test_strix_names_still_work_and_agree_with_vllm_names(tmp_path: Path) -> None:
    out = tmp_path / "own.json"
    line = (
        "vllm bench serve --url {url} --requests 4 --concurrency 2 --warmup 1 "
        f"--random-input-len 16 --random-output-len 3 --out {out} --result-format vllm "
        f"--result-dir {tmp_path} --result-filename v.json"
    )
    assert run_against_server(line, ttft_ms=1, itl_ms=0) == 0
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["num_prompts"] == 4 and doc["completed"] == 4 and doc["max_concurrency"] == 2
    (level,) = json.loads(out.read_text())["scenarios"]["random"]["levels"]
    assert level["concurrency"] == 2 and level["requests_ok"] == 4


def test_a_dataset_level_writes_the_vllm_shape_too(tmp_path: Path) -> None:
    ds = tmp_path / "p.jsonl"
    ds.write_text(
        "".join(json.dumps({"prompt": f"hello {i}", "output_tokens_count": 3}) + "\n" for i in range(3))
    )
    line = (
        f"vllm bench serve --url {{url}} --dataset {ds} --num-prompts 6 --max-concurrency 2 "
        f"--save-result --result-dir {tmp_path} --result-filename d.json"
    )
    assert run_against_server(line, ttft_ms=1, itl_ms=0) == 0
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["backend"] == "openai-chat" and doc["completed"] == 6 and doc["max_concurrency"] == 2


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--dataset-name", "sharegpt"], "--dataset-name sharegpt"),
        (["--dataset-name", "random", "--dataset-path", "x.json"], "--dataset-path"),
        (["--random-prefix-len", "16"], "--random-prefix-len 16"),
        (["--backend", "tgi", "--num-prompts", "3"], "--backend tgi"),
        (["--backend", "openai", "--endpoint", "/v1/chat/completions"], "--endpoint /v1/chat/completions"),
        (["--backend", "openai-chat", "--endpoint", "/v1/completions"], "--endpoint /v1/completions"),
        (["--goodput", "itl:10", "--num-prompts", "3"], "--goodput 'itl:10'"),
        (["--goodput", "ttft=10", "--num-prompts", "3"], "--goodput 'ttft=10'"),
        (["--metadata", "novalue", "--num-prompts", "3"], "--metadata 'novalue'"),
        (["--percentile-metrics", "ttft,bogus", "--num-prompts", "3"], "--percentile-metrics: unknown bogus"),
        (["--metric-percentiles", "101", "--num-prompts", "3"], "--metric-percentiles"),
        (["--max-concurrency", "0"], "--max-concurrency"),
        (["--concurrency", "1,2", "--num-prompts", "3"], "--concurrency 1,2"),
        (["--requests", "3", "--num-prompts", "4"], "--requests 3 and --num-prompts 4"),
        (["--url", "http://x", "--scenario", "decode", "--save-result"], "--result-format vllm"),
        (["--scenario", "decode", "--random-input-len", "8"], "--random-input-len"),
        (["--url", "http://x", "--scenario", "decode", "--request-rate", "2"], "--rate"),
        (["--url", "http://x", "--host", "h"], "--host/--port"),
        (["--num-prompts", "3", "--result-dir", "d"], "--result-dir"),
        (["--url", "http://x"], "--scenario"),
    ],
)
def test_a_flag_strix_cannot_honour_is_refused_by_name(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(flag)):
        bench(argv)


@pytest.mark.parametrize("flag", ["--temperature", "--save-detailed", "--ramp-up-strategy", "--profile"])
def test_a_vllm_flag_strix_does_not_know_is_refused_by_argparse(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        bench(["--num-prompts", "3", flag])
    assert flag in capsys.readouterr().err


def test_value_stats_and_percentile_keys() -> None:
    s = value_stats([1.0, 2.0, 3.0, 4.0])
    assert s["count"] == 4 and s["min"] == 1.0 and s["max"] == 4.0 and s["mean"] == 2.5
    assert s["std"] == pytest.approx(math.sqrt(1.25))  # population std (ddof 0), as vLLM's np.std
    assert s["p50"] == 2.5
    empty = value_stats([])
    assert empty["count"] == 0 and all(v is None for k, v in empty.items() if k != "count")
    assert [percentile_key(p) for p in (99.0, 99.9, 50, 0.5)] == ["p99", "p99.9", "p50", "p0.5"]


def test_random_lengths_follow_vllm_range_ratio() -> None:
    ins, outs = random_lengths(200, 100, 10, 0.5, seed=3)
    assert min(ins) >= 50 and max(ins) <= 150 and min(outs) >= 5 and max(outs) <= 15
    assert (ins, outs) == random_lengths(200, 100, 10, 0.5, seed=3)  # seeded
    assert random_lengths(3, 64, 8) == ([64] * 3, [8] * 3)
    with pytest.raises(ValueError, match="range-ratio"):
        random_lengths(3, 64, 8, 1.0)


def _record(i: int, ok: bool, ttft: float | None, e2e: float | None, out: int | None) -> RequestRecord:
    from datetime import UTC, datetime

    events = (
        [ttft + k * (e2e - ttft) / (out - 1) for k in range(out)]  # type: ignore[operator]
        if ok and ttft and e2e and out
        else []
    )
    return RequestRecord(
        run_id="r",
        scenario="random",
        level=2,
        level_kind="concurrency",
        request_index=i,
        warmup=False,
        sent_at=datetime.now(UTC),
        sent_offset_ms=100.0 * i,
        queue_ms=1.0,
        ttfb_ms=ttft,
        ttft_ms=ttft,
        e2e_ms=e2e,
        input_tokens=10,
        input_tokens_estimated=False,
        output_tokens=out,
        output_tokens_estimated=False,
        cached_tokens=None,
        ok=ok,
        error_class=None if ok else "http_500",
        error_message=None,
        event_offsets_ms=events,
        event_tokens=[1] * len(events),
    )


def test_vllm_result_counts_a_failure_and_never_draws_it_as_zero() -> None:
    recs = [
        _record(0, True, 10.0, 50.0, 5),
        _record(1, False, None, None, None),
        _record(2, True, 20.0, 60.0, 5),
    ]
    agg = LevelAggregate(
        run_id="r",
        scenario="random",
        level=2,
        level_kind="concurrency",
        requests_ok=2,
        requests_failed=1,
        duration_s=0.5,
    )
    opts = VllmOptions(model_id="m", num_prompts=3, max_concurrency=2, goodput={"ttft": 15.0})
    doc = vllm_result(recs, agg, opts)
    assert doc["completed"] == 2 and doc["failed"] == 1
    assert doc["latencies"] == [0.05, None, 0.06]
    assert doc["mean_ttft_ms"] == 15.0 and doc["p99_ttft_ms"] == pytest.approx(19.9)
    assert doc["mean_tpot_ms"] == 10.0 and doc["std_tpot_ms"] == 0.0
    assert doc["request_throughput"] == 4.0 and doc["request_goodput"] == 2.0  # one of two meets ttft <= 15
    assert doc["total_input_tokens"] == 20 and doc["total_token_throughput"] == (20 + 10) / 0.5
    assert "mean_e2el_ms" not in doc and "mean_client_queue_time_ms" not in doc  # not selected
    assert result_filename(opts, "d", None).name == f"openai-infqps-concurrency2-m-{opts.date}.json"


def _plan(argv: list[str]) -> vllm_flags.Plan:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    cli_bench.register(parser.add_subparsers())
    return vllm_flags.plan_run(parser.parse_args(["bench", *argv]))


def test_the_request_path_is_base_url_plus_endpoint_as_in_vllm() -> None:
    p = _plan(["--base-url", "http://h:8000/v1", "--endpoint", "/completions", "--num-prompts", "2"])
    assert (p.url, p.endpoint, p.chat) == ("http://h:8000/v1", "/v1/completions", False)
    p = _plan(["--host", "box", "--port", "9000", "--backend", "openai-chat", "--num-prompts", "2"])
    assert (p.url, p.endpoint, p.chat) == ("http://box:9000", "/v1/chat/completions", True)
    p = _plan(["--num-prompts", "2", "--input-len", "7", "--random-input-len", "9", "--request-rate", "inf"])
    assert (
        p.url == "http://127.0.0.1:8000" and p.input_lens == [7, 7] and p.rate is None
    )  # vLLM: --input-len wins
