"""Schema v21: a run's power, energy and throttling mark in table ``runs`` and view ``v_runs``, on a real
DuckDB file: a v19 warehouse migrates with its runs kept (the new columns empty), a run's GPU samples
are stored beside its memory samples and left out of v_memory's memory figures."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from support.warehouse import T0, create_at_version, make_run

from strix_pipeline.hosts.probes import energy
from strix_pipeline.records import MemorySample, RunRecord, column_names
from strix_pipeline.runner.record import record_energy
from strix_pipeline.warehouse import Warehouse, current_schema_version

V21 = [
    "idle_power_w",
    "power_source",
    "decode_j_per_request",
    "decode_tokens_per_j",
    "decode_power_w",
    "load_level",
    "load_j_per_request",
    "load_tokens_per_j",
    "load_power_w",
    "energy_problem",
    "throttled",
    "throttle_reason",
]
LATER = ["baseline_source"]  # runs' columns of later schemas: not in a v19 table either


def gpu_samples(run_id: str) -> list[MemorySample]:
    out = [
        MemorySample(
            run_id, T0 - timedelta(seconds=2), "baseline", "gpu:card1:power1_average", "power_uw", 31_000_000
        )
    ]
    for t in range(7):
        at = T0 + timedelta(seconds=t)
        out += [
            MemorySample(run_id, at, "bench", "gpu:card1:power1_average", "power_uw", 125_000_000),
            MemorySample(run_id, at, "bench", "gpu:card1:freq1_input", "sclk_hz", 1_500_000_000),
            MemorySample(run_id, at, "bench", "gpu:card1:pp_dpm_sclk", "sclk_max_hz", 2_900_000_000),
            MemorySample(run_id, at, "bench", "gpu:card1:gpu_busy_percent", "busy_pct", 99),
            MemorySample(run_id, at, "bench", "sysfs:card1", "gtt_used", 8 * 2**30),
        ]
    return out


def test_a_v19_warehouse_migrates_with_its_runs_and_empty_energy_columns(tmp_path: Path) -> None:
    path = tmp_path / "v19.duckdb"
    old = create_at_version(path, 19)
    run = make_run("old").run
    cols = [c for c in column_names(RunRecord) if c not in V21 + LATER]
    old.con.execute(
        f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        [getattr(run, c) for c in cols],
    ).fetchall()
    old.close()
    with Warehouse.open(path) as w:
        assert w.schema_version == current_schema_version() >= 20
        row = w.query_df(f"SELECT run_id, {', '.join(V21)} FROM v_runs").to_dicts()
        assert row == [{"run_id": "old", **dict.fromkeys(V21)}]


def test_a_boxs_run_shows_its_energy_and_its_throttle_in_v_runs(tmp_path: Path) -> None:
    result = make_run("box")
    for a in result.aggregates:
        a.tpot_mean_ms, a.output_tokens_total = 20.0, 512
    result.memory = gpu_samples("box")
    record_energy(result, 5)
    local = make_run("local", host="local")
    local.memory = [MemorySample("local", T0, "bench", "sysfs:card1", "gtt_used", 2**30)]
    record_energy(local, 5)
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as w:
        w.load_runs([result, local])
    with Warehouse.open(path, read_only=True) as w:
        rows = {r["run_id"]: r for r in w.query_df(f"SELECT run_id, {', '.join(V21)} FROM v_runs").to_dicts()}
        box = rows["box"]
        assert box["idle_power_w"] == pytest.approx(31.0)
        assert box["decode_power_w"] == pytest.approx(125.0)
        assert box["decode_j_per_request"] == pytest.approx(250.0)  # 4 s x 125 W over 2 requests
        assert box["load_level"] == 5 and box["load_tokens_per_j"] == pytest.approx(round(512 / 500, 3))
        assert box["power_source"] == "card1:power1_average" and box["energy_problem"] is None
        assert box["throttled"] is True and "1500" not in box["throttle_reason"]
        assert "below 80% of 2900 MHz in 7 of 7 busy samples" in box["throttle_reason"]
        assert rows["local"]["energy_problem"] == energy.NO_POWER_COUNTER
        assert rows["local"]["decode_tokens_per_j"] is None and rows["local"]["throttled"] is None
        # the GPU's samples are stored beside the memory ones, and v_memory counts memory readings only
        counts = dict(w.con.execute("SELECT run_id, samples FROM v_memory").fetchall())
        assert counts == {"box": 7, "local": 1}
        stored = w.con.execute(
            "SELECT count(*) FROM memory_samples WHERE run_id = 'box' AND source LIKE 'gpu:%'"
        ).fetchone()
        assert stored == (1 + 7 * 4,)
