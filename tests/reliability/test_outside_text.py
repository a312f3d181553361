"""Strings from outside are never acted on by the terminal: a `strix query` error that quotes a
warehouse value (here a run id holding a screen-clearing escape and a hyperlink) writes its control
characters as escapes, as the result formats do."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.warehouse import make_run

from strix_pipeline.cli import main
from strix_pipeline.config import DEFAULT_CONFIG
from strix_pipeline.warehouse import Warehouse

ESC = "\x1b"
HOSTILE = f"run{ESC}]8;;https://evil.example/{ESC}\\x{ESC}[2J"


def test_a_query_error_quoting_a_warehouse_value_is_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "strix.toml"
    cfg.write_text(DEFAULT_CONFIG.read_text())
    monkeypatch.setenv("STRIX_CONFIG", str(cfg))
    wh = tmp_path / "w.duckdb"
    with Warehouse.open(wh) as w:
        w.load_run(make_run(HOSTILE))
    rc = main(["query", "SELECT CAST(run_id AS INTEGER) FROM runs", "--warehouse", str(wh)])
    err = capsys.readouterr().err
    assert rc == 1 and "\\x1b]8;;https://evil.example/" in err, err
    assert ESC not in err
