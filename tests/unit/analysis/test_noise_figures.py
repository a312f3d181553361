"""Every weekly analysis keeps each series' run-to-run noise as its canary measured
it (table noise_figures: the coefficient of variation of one run and the smallest step 3 / 5 / 10
pairs detect), and `strix changes` shows them."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from support.decision_seed import make_config, run_record, run_result

from strix_pipeline.analysis.canary import NOISE_RUNS
from strix_pipeline.analysis.changes import detect_changes
from strix_pipeline.cli import decide
from strix_pipeline.planning.canary import Canary
from strix_pipeline.stats import paired
from strix_pipeline.warehouse import Warehouse

T = datetime(2026, 10, 5, 3, tzinfo=UTC)
CANARY = Canary("local", "llamacpp", "b100")
# the canary's weekly decode tok/s at one client; the newest NOISE_RUNS are the figure's
WEEKLY = [90.0, 100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 97.5, 103.0, 99.0, 100.0, 98.5]


def weekly(tag: str, week: int, tok_s: float):
    run = run_record(
        f"{tag}-w{week}", "llamacpp", host="local", tag=tag, started_at=T + timedelta(weeks=week)
    )
    return run_result(run, sweep={1: (200.0, tok_s)})


def analysed(tmp_path: Path, results, now: datetime) -> Warehouse:
    wh = Warehouse.open(tmp_path / "w.duckdb")
    wh.load_runs(results)
    detect_changes(wh, make_config("local"), now=now, canaries=[CANARY])
    return wh


def test_the_canarys_latest_runs_give_each_series_its_noise(tmp_path: Path) -> None:
    # the canary every week, and a newer release twice: only the canary's runs make the figure
    results = [weekly("b100", w, v) for w, v in enumerate(WEEKLY)]
    results += [weekly("b200", 20, 80.0), weekly("b200", 21, 120.0)]
    now = T + timedelta(weeks=22)
    with analysed(tmp_path, results, now) as wh:
        rows = [r for r in wh.latest_noise() if r.metric == "output_tokens_per_s"]
    (row,) = rows
    kept = WEEKLY[-NOISE_RUNS:]
    assert (row.host, row.engine, row.version, row.runs) == ("local", "llamacpp", "b100", NOISE_RUNS)
    assert row.run_ids == [f"b100-w{w}" for w in range(len(WEEKLY) - NOISE_RUNS, len(WEEKLY))]
    assert row.cv == pytest.approx(statistics.stdev(kept) / statistics.mean(kept), rel=1e-6)
    assert row.computed_at == now and row.scenario == "concurrency_sweep" and row.level == 1
    steps = (row.step_3_pairs, row.step_5_pairs, row.step_10_pairs)
    assert steps == pytest.approx(tuple(paired.detectable_step(row.cv, n) for n in (3, 5, 10)))
    assert steps[0] > steps[1] > steps[2] > 0


def test_a_canary_with_two_runs_gives_no_figure_and_strix_changes_says_so(tmp_path: Path, capsys) -> None:
    results = [weekly("b100", w, v) for w, v in enumerate(WEEKLY[:2])]
    with analysed(tmp_path, results, T + timedelta(weeks=3)) as wh:
        assert wh.latest_noise() == []
    decide.print_noise([])
    assert "not measured yet" in capsys.readouterr().out


def test_strix_changes_shows_the_newest_analysis(tmp_path: Path, monkeypatch) -> None:
    results = [weekly("b100", w, v) for w, v in enumerate(WEEKLY)]
    with analysed(tmp_path, results[:6], T + timedelta(weeks=6)) as wh:
        wh.load_runs(results[6:])
        detect_changes(wh, make_config("local"), now=T + timedelta(weeks=13), canaries=[CANARY])
        rows = wh.latest_noise()
    assert {r.computed_at for r in rows} == {T + timedelta(weeks=13)} and {r.runs for r in rows} == {
        NOISE_RUNS
    }
    console = Console(record=True, width=200)
    monkeypatch.setattr(decide, "Console", lambda: console)
    decide.print_noise(rows)
    line = next(x for x in console.export_text().splitlines() if "output_tokens_per_s" in x)
    tok = next(r for r in rows if r.metric == "output_tokens_per_s")
    assert "llamacpp b100" in line and f"{tok.cv:.1%}" in line and f"{tok.step_5_pairs:.1%}" in line
