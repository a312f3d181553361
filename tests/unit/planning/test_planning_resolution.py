"""What a comparison by pairs can resolve at a measured noise (planning/resolution.py): the pairs a
target needs, whether the cap gets there, the smallest step it can; and `strix plan` / `strix compare`
say it before anything runs."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from support.pair_standin import PairStandIn
from support.pipeline_helpers import write_config

from strix_pipeline.cli import compare as compare_cli
from strix_pipeline.cli import main as strix_main
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.resolution import (
    MOST_PAIRS,
    figure_for,
    ladder_caps,
    ladder_step,
    pairs_needed,
    resolution,
    resolution_lines,
)
from strix_pipeline.runner import pair_runs
from strix_pipeline.stats import paired
from strix_pipeline.warehouse import NoiseRecord, Warehouse

NOW = datetime(2026, 12, 7, 3, tzinfo=UTC)


def figure(
    metric: str, cv: float, *, scenario: str = "decode", level: int = 1, runs: int = 10
) -> NoiseRecord:
    steps = [paired.detectable_step(cv, n) for n in (3, 5, 10)]
    return NoiseRecord(
        NOW,
        "local",
        "llamacpp",
        "b100",
        f"fp/{scenario}",
        scenario,
        level,
        metric,
        runs,
        100.0,
        cv,
        *steps,
        [],
    )


def test_the_pairs_a_target_needs_and_what_the_cap_resolves() -> None:
    # the README's VM (decode 1.3 % CV): 5 % within the default cap of 10
    quiet = resolution("decode_tokens_per_s", "decode@1", 0.013, 10, 0.05, 10)
    assert quiet.resolves and quiet.needed is not None and quiet.needed <= 10
    assert "the cap of 10 resolves it" in quiet.text()
    # a 2-core AVX2 host (decode 6 % CV, TTFT p50 at 5 clients 17 %): said up front, with the step
    decode = resolution("decode_tokens_per_s", "decode@1", 0.06, 10, 0.05, 10)
    assert not decode.resolves and decode.needed == 40 and 0.08 < decode.step_at_cap < 0.11
    ttft = resolution("ttft_p95_ms", "concurrency_sweep@5", 0.17, 10, 0.10, 10)
    assert not ttft.resolves and ttft.step_at_cap > 0.25
    said = "±10% needs 80 pairs; the cap of 10 cannot: the smallest step it resolves here is ±28"
    assert said in ttft.text()
    # the count is the first cap on the ladder's climb that resolves, and no earlier one does
    for cv, target in ((0.02, 0.05), (0.06, 0.05), (0.03, 0.02)):
        n = pairs_needed(cv, target)
        caps = ladder_caps()
        assert n in caps and ladder_step(cv, n) <= target
        assert all(ladder_step(cv, c) > target for c in caps[: caps.index(n)])
    assert (
        pairs_needed(0.5, 0.01) is None
        and f"more than {MOST_PAIRS}" in resolution("m", "s", 0.5, 10, 0.01, 10).text()
    )
    # the last look spends part of alpha: the ladder resolves less than one test at the whole alpha
    assert ladder_step(0.03, 10) > paired.detectable_step(0.03, 10)
    assert "rough: 4 runs" in resolution("m", "s", 0.03, 4, 0.05, 10).text()


def test_the_step_said_at_the_cap_is_what_the_ladder_finds() -> None:
    """Run the ladder itself (stats/paired.sequential) on simulated pairs at 4 % CV, cap 10: the step
    said at the cap is called *different* in most comparisons (80 % power by construction, less the
    early looks' share), a step of half that rarely."""
    cv, cap = 0.04, 10
    step = ladder_step(cv, cap)
    rng = np.random.default_rng(51)

    def called(true_step: float) -> float:
        hits = 0
        for _ in range(400):
            a = 100 * np.exp(rng.normal(0, cv, cap))
            b = 100 * (1 + true_step) * np.exp(rng.normal(0, cv, cap))
            r = paired.sequential(list(a), list(b), target=step, higher_is_better=True, cap=cap)
            hits += r.verdict == "different"
        return hits / 400

    assert called(step) >= 0.75
    assert called(step / 2) <= 0.5


def test_the_figure_is_the_metrics_nearest_level_on_this_host_and_engine() -> None:
    rows = [
        figure("prefill_tokens_per_s", 0.02, scenario="prefill_ladder", level=2048),
        figure("prefill_tokens_per_s", 0.05, scenario="prefill_ladder", level=512),
        figure("ttft_p95_ms", 0.04, scenario="concurrency_sweep", level=1),
        figure("ttft_p95_ms", 0.09, scenario="prefix_cache", level=1),
    ]
    other = NoiseRecord(
        NOW, "box", "llamacpp", "b1", "f", "decode", 1, "decode_tokens_per_s", 10, 1, 0.001, 0, 0, 0, []
    )
    assert figure_for(rows, "local", "llamacpp", "prefill_tokens_per_s", 600).level == 512
    assert figure_for(rows, "local", "llamacpp", "ttft_p95_ms", 1).cv == 0.09  # as near: the noisier
    assert figure_for([*rows, other], "local", "llamacpp", "decode_tokens_per_s", 1) is None
    lines = resolution_lines(rows, "local", "llamacpp", {"ttft_p95_ms": 0.1, "ttft_p50_ms": 0.05}, 10, {})
    assert lines[0].startswith("ttft_p95_ms (CV 9.0% from 10 runs, prefix_cache@1): ±10% needs")
    assert lines[1].startswith("no noise figure for ttft_p50_ms here")


def _store(path, rows: list[NoiseRecord]) -> None:
    config = load_config(path)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.save_noise(rows)


NOISY = [
    figure("decode_tokens_per_s", 0.065),
    figure("prefill_tokens_per_s", 0.02, scenario="prefill_ladder", level=512),
]


def test_plan_says_what_the_cap_resolves_on_this_machine(tmp_path, capsys) -> None:
    path = write_config(tmp_path)
    _store(path, NOISY)
    assert strix_main(["--config", str(path), "plan", "--week", "--from", "2026-12-07"]) == 0
    out = capsys.readouterr().out
    assert "comparisons by pairs on local (llamacpp), target ±5%, cap 10 pairs:" in out
    decode = next(x for x in out.splitlines() if "decode_tokens_per_s (CV 6.5%" in x)
    assert "±5% needs 40 pairs; the cap of 10 cannot: the smallest step it resolves here is ±10" in decode
    prefill = next(x for x in out.splitlines() if "prefill_tokens_per_s (CV 2.0%" in x)
    assert "the cap of 10 resolves it" in prefill
    # a configured cap of 40 resolves what 10 cannot
    path.write_text(path.read_text() + "\n[analysis]\ncompare_max_pairs = 40\n")
    assert strix_main(["--config", str(path), "plan", "--week", "--from", "2026-12-07"]) == 0
    out = capsys.readouterr().out
    assert (
        "decode_tokens_per_s (CV 6.5% from 10 runs, decode@1): ±5% needs 40 pairs; the cap of 40 resolves it"
        in out
    )


def test_plan_without_measured_noise_says_so(tmp_path, capsys) -> None:
    path = write_config(tmp_path)
    assert strix_main(["--config", str(path), "plan", "--week", "--from", "2026-12-07"]) == 0
    assert "no noise measured on this machine yet" in capsys.readouterr().out


@pytest.fixture
def standin(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(pair_runs, "installed_llama_release", lambda: "11434.0.0")
    monkeypatch.setattr(pair_runs.llamacpp_build, "find_release", {"11401.0.0": tmp_path / "bin"}.get)
    monkeypatch.setattr(pair_runs, "cached_releases", lambda: ["b11401"])
    engine = PairStandIn(factor=1.0, cv=0.02, seed=3)
    monkeypatch.setattr(compare_cli, "local_runs", lambda *a, **k: engine)
    return engine


def test_compare_says_it_before_the_first_pair(tmp_path, capsys, standin) -> None:
    path = write_config(tmp_path)
    _store(path, NOISY)
    args = ["--config", str(path), "compare", "b11401", "b11434", "--metric", "decode_tokens_per_s"]
    assert strix_main([*args, "--seed", "1", "--cap", "3", "--target", "0.2"]) == 0
    out = capsys.readouterr().out
    said = out.index("on this machine's measured noise: decode_tokens_per_s (CV 6.5% from 10 runs")
    assert said < out.index("pair 1 ")
    line = out[said:].splitlines()[0]
    assert "±20% needs 5 pairs; the cap of 3 cannot: the smallest step it resolves here is" in line
