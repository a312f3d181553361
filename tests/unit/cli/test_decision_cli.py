"""`strix decide`, `strix changes`, `strix ack` through their argparse registration."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta

import pytest
from support.decision_seed import make_config, run_record, run_result, seeded, september_runs

from strix_pipeline.analysis.changes import detect_changes
from strix_pipeline.cli import decide as cli_decide


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="strix")
    parser.add_argument("--config")
    cli_decide.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def recent_september(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_decide, "load_config", lambda path=None: make_config())
    # the CLI evaluates at the real "now": place the September state a day ago
    at = datetime.now(UTC) - timedelta(days=1)
    path = tmp_path / "w.duckdb"
    seeded(path, september_runs(at)).close()
    return path


def test_decide_json_and_save(recent_september, capsys):
    assert run_cli(["decide", "--json", "--warehouse", str(recent_september)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "evaluate"
    assert [c["status"] for c in out["criteria"]] == ["pass", "pass", "pass", "fail", "fail"]
    assert out["criteria"][2]["quantization_mismatch"] is True
    assert run_cli(["decide", "--save", "--warehouse", str(recent_september)]) == 0
    text = capsys.readouterr().out
    assert "EVALUATE" in text and "C5" in text
    assert run_cli(["decide", "--json", "--warehouse", str(recent_september)]) == 0
    assert json.loads(capsys.readouterr().out)["previous_verdict"] == "evaluate"


def test_changes_and_ack(tmp_path, capsys):
    path = tmp_path / "w.duckdb"
    now = datetime(2026, 9, 1, tzinfo=UTC)
    results = [
        run_result(
            run_record(f"r{i}", "vllm", tag=f"v0.{i:02d}.0", started_at=now + timedelta(days=i)),
            ttft5=(p, p, p),
        )
        for i, p in enumerate([100.0, 101.0, 99.5, 100.5, 100.0, 120.0, 121.0, 119.5])
    ]
    wh = seeded(path, results)
    (change,) = [c for c in detect_changes(wh, make_config(), now=now) if c.metric == "ttft_p95_ms"]
    wh.close()
    assert run_cli(["changes", "--json", "--warehouse", str(path)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert change.change_id in {r["change_id"] for r in listed}
    assert (
        run_cli(
            ["ack", change.change_id, "--reason", "expected: chunked prefill on", "--warehouse", str(path)]
        )
        == 0
    )
    assert run_cli(["ack", "nope", "--reason", "x", "--warehouse", str(path)]) == 1
    capsys.readouterr()
    assert run_cli(["changes", "--json", "--warehouse", str(path)]) == 0
    assert change.change_id not in {r["change_id"] for r in json.loads(capsys.readouterr().out)}
    assert run_cli(["changes", "--all", "--json", "--warehouse", str(path)]) == 0
    acked = {r["change_id"]: r for r in json.loads(capsys.readouterr().out)}[change.change_id]
    assert acked["ack_status"] == "acknowledged" and acked["ack_reason"] == "expected: chunked prefill on"


def test_decide_without_warehouse_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli_decide, "load_config", lambda path=None: make_config())
    assert run_cli(["decide", "--warehouse", str(tmp_path / "missing.duckdb")]) == 1
    assert "no warehouse" in capsys.readouterr().err


def test_no_change_point_says_none_and_the_noise_that_would_hide_one(tmp_path, capsys, monkeypatch):
    from strix_pipeline.cli import common

    monkeypatch.setattr(common, "load_config", lambda path=None: make_config())
    path = tmp_path / "w.duckdb"
    now = datetime(2026, 9, 1, tzinfo=UTC)
    results = [
        run_result(
            run_record(f"r{i}", "vllm", tag=f"v0.{i:02d}.0", started_at=now + timedelta(days=i)),
            ttft5=(p, p, p),
        )
        for i, p in enumerate([100.0, 104.0, 98.0, 103.0])
    ]
    wh = seeded(path, results)
    assert [c for c in detect_changes(wh, make_config(), now=now) if c.metric == "ttft_p95_ms"] == []
    wh.close()
    assert run_cli(["changes", "--warehouse", str(path)]) == 0
    out = capsys.readouterr().out
    assert "No unacknowledged change points found in" in out
    rows = [[c.strip() for c in x.replace("│", "|").split("|") if c.strip()] for x in out.splitlines()]
    # a narrow terminal folds the cells: the row's first line has the figures
    cells = next(
        (r for r in rows if r and r[-1].endswith("%") and any(c.startswith("ttft_p95") for c in r)), None
    )
    assert cells, out
    # successive differences 4, -6, 5 around ~101: noise ~5 %, and 3x that is the smallest step counted
    noise, floor = float(cells[-2].rstrip("%")), float(cells[-1].rstrip("%"))
    assert cells[5] == "4" and 3 < noise < 7 and floor == pytest.approx(3 * noise, abs=0.15)
