"""`strix report [--out DIR]`: the site from the warehouse, written only where it may be."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from support.report_seed import report_config, report_warehouse

from strix_pipeline.cli import common
from strix_pipeline.cli import report as cli_report


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="strix")
    parser.add_argument("--config")
    cli_report.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(common, "load_config", lambda path=None: report_config())
    wh, _ = report_warehouse(tmp_path / "w.duckdb")
    wh.close()
    return tmp_path / "w.duckdb"


def test_report_writes_the_site_and_says_where(warehouse: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "site"
    assert run_cli(["report", "--warehouse", str(warehouse), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{out / 'index.html'} (3 run pages)" in printed
    assert "verdict: evaluate" in printed and "6 entries, 6 new" in printed
    assert {p.name for p in out.iterdir()} == {
        "index.html",
        "glossary.html",
        "feed.xml",
        "report.json",
        "runs",
    }
    # again: the same feed, nothing new
    assert run_cli(["report", "--warehouse", str(warehouse), "--out", str(out)]) == 0
    assert "6 entries, 0 new" in capsys.readouterr().out


def test_report_never_writes_into_the_warehouse_or_a_foreign_folder(
    warehouse: Path, tmp_path: Path, capsys
) -> None:
    assert run_cli(["report", "--warehouse", str(warehouse), "--out", str(warehouse)]) == 1
    assert "inside the warehouse" in capsys.readouterr().err
    assert run_cli(["report", "--warehouse", str(warehouse), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"--out {tmp_path}: holds files and no report.json" in err
    assert run_cli(["report", "--warehouse", str(warehouse), "--out", str(tmp_path / "no" / "such")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_report_without_a_warehouse_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(common, "load_config", lambda path=None: report_config())
    missing = tmp_path / "none.duckdb"
    assert run_cli(["report", "--warehouse", str(missing), "--out", str(tmp_path / "site")]) == 1
    assert str(missing) in capsys.readouterr().err
    assert not (tmp_path / "site").exists()
