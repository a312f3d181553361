"""A run records what its suite profile asks (the workload), and the warehouse keeps it in the series."""

from __future__ import annotations

from strix_pipeline.config import DEFAULT_CONFIG
from strix_pipeline.config_load import load_config
from strix_pipeline.fingerprint import run_fingerprint, workload_digest
from strix_pipeline.records import RunResult
from strix_pipeline.runner.record import new_record
from strix_pipeline.runner.target import BenchmarkTarget
from strix_pipeline.warehouse import Warehouse


def test_quick_and_decision_runs_of_one_engine_are_two_series_and_the_warehouse_says_why(tmp_path):
    config = load_config(DEFAULT_CONFIG)
    runs = []
    for run_id, profile in (("q", "quick"), ("p", "decision")):
        run = new_record(
            config, BenchmarkTarget("local", "llamacpp", "gemma3-270m", profile, None), run_id, None
        )
        assert run.workload == workload_digest(config.profiles[profile])
        run.status, run.fingerprint = "ok", run_fingerprint(run)
        runs.append(run)
    assert runs[0].fingerprint != runs[1].fingerprint  # same engine, model and host; other requests
    wh = Warehouse.open(tmp_path / "w.duckdb")
    for run in runs:
        wh.load_run(RunResult(run=run))
    stored = dict(wh.con.execute("SELECT run_id, workload FROM v_run_base").fetchall())
    assert stored == {"q": runs[0].workload, "p": runs[1].workload}
