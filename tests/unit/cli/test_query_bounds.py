"""Every numeric and size bound of `strix query` is bounded at the command line and in the
configuration, refused in one line naming the value (--limit -5 panicked in Polars, --limit 10^20 and
a 400-digit --max-bytes or max_bytes overflowed); an --out name is measured in bytes (over 255 bytes
was a traceback, and a valid 252-byte name was refused: its temporary name was cut by characters)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strix_pipeline.cli import main
from strix_pipeline.config import DEFAULT_CONFIG, ConfigError
from strix_pipeline.config_load import load_config
from strix_pipeline.warehouse import Warehouse

HUGE = "9" * 400


@pytest.fixture
def wh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = tmp_path / "strix.toml"
    cfg.write_text(DEFAULT_CONFIG.read_text())
    monkeypatch.setenv("STRIX_CONFIG", str(cfg))
    path = tmp_path / "w.duckdb"
    Warehouse.open(path).close()
    return path


def query(wh: Path, *extra: str) -> int:
    try:
        return main(["query", "SELECT 1 AS one", "--warehouse", str(wh), "--lock-wait", "1", *extra])
    except SystemExit as e:  # argparse's refusal
        return int(e.code or 0)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--limit", "-5"),
        ("--limit", str(10**20)),
        ("--max-rows", str(10**20)),
        ("--max-rows", "0"),
        ("--max-bytes", HUGE + "MB"),
        ("--max-bytes", "2000TB"),
    ],
)
def test_an_unbounded_number_is_one_line_naming_it(wh: Path, flag: str, value: str, capsys) -> None:
    assert query(wh, flag, value) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # argparse's usage, then the one line of the refusal
    assert "Traceback" not in err and last.startswith("strix query: error:") and value[:40] in last, err


def test_a_limit_in_range_still_works(wh: Path, capsys) -> None:
    assert query(wh, "--limit", "0") == 0
    assert query(wh, "--limit", "5", "--max-rows", "10", "--max-bytes", "1MB") == 0


@pytest.mark.parametrize("line", [f'max_bytes = "{HUGE}MB"', f"max_rows = {10**20}"])
def test_an_unbounded_number_in_the_configuration_is_refused(tmp_path: Path, line: str) -> None:
    cfg = tmp_path / "strix.toml"
    cfg.write_text(DEFAULT_CONFIG.read_text() + f"\n[query]\n{line}\n")
    with pytest.raises(ConfigError, match="max_"):
        load_config(cfg)


def test_an_out_name_is_measured_in_bytes(wh: Path, tmp_path: Path, capsys) -> None:
    too_long = tmp_path / ("é" * 128)  # 256 bytes
    assert query(wh, "--format", "csv", "--out", str(too_long)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "256 bytes" in err and too_long.name not in os.listdir(tmp_path)
    fits = tmp_path / ("é" * 126)  # 252 bytes: a valid name
    assert query(wh, "--format", "csv", "--out", str(fits)) == 0
    assert fits.read_text().splitlines() == ["one", "1"]
