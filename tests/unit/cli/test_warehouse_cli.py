"""`strix query` and `strix export` against a seeded warehouse, through the real CLI entry point."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import polars as pl
import pytest
from support.warehouse import make_run

from strix_pipeline.cli import query as cli_query
from strix_pipeline.warehouse import Warehouse


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as wh:
        wh.load_run(make_run("l1"))
        wh.load_run(make_run("v1", engine="vllm", quantization="BF16"))
    return path


def strix(*argv: str) -> int:
    # the real entry point: parser built from every command module, as the console script does
    from strix_pipeline.cli import main

    return main(list(argv))


def handler(*argv: str) -> int:
    # this module's parsers alone, for the output-format tests
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    cli_query.register(p.add_subparsers())
    args = p.parse_args(list(argv))
    return args.func(args)


def test_strix_query_drop_table_fails_and_the_table_is_still_there(seeded: Path, capsys) -> None:
    rc = strix("query", "DROP TABLE runs", "--warehouse", str(seeded))
    err = capsys.readouterr().err
    assert rc != 0
    assert "read-only" in err and "nothing was changed" in err
    with Warehouse.open(seeded, read_only=True) as wh:
        assert "runs" in wh.table_names()
        assert wh.count("runs") == 2


@pytest.mark.parametrize(
    "sql", ["DELETE FROM requests", "INSERT INTO hosts (name) VALUES ('x')", "CREATE TABLE t (a INT)"]
)
def test_other_writes_fail_too(seeded: Path, sql: str, capsys) -> None:
    assert handler("query", sql, "--warehouse", str(seeded)) == 1
    assert "read-only" in capsys.readouterr().err
    with Warehouse.open(seeded, read_only=True) as wh:
        assert wh.count("requests") == 16 and "t" not in wh.table_names()


def test_query_formats(seeded: Path, tmp_path: Path, capsys) -> None:
    sql = "SELECT run_id, engine, held_gib FROM v_runs ORDER BY run_id"
    assert handler("query", sql, "--warehouse", str(seeded), "--format", "json") == 0
    assert json.loads(capsys.readouterr().out) == [
        {"run_id": "l1", "engine": "llamacpp", "held_gib": 20.0},
        {"run_id": "v1", "engine": "vllm", "held_gib": 20.0},
    ]
    # nested values become JSON text in CSV
    assert (
        handler(
            "query",
            "SELECT run_id, event_tokens FROM requests LIMIT 1",
            "--warehouse",
            str(seeded),
            "--format",
            "csv",
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "run_id,event_tokens" and out[1].endswith('"[1, 2, 1]"')
    target = tmp_path / "q.parquet"
    assert handler("query", sql, "--warehouse", str(seeded), "--format", "parquet", "--out", str(target)) == 0
    assert pl.read_parquet(target)["run_id"].to_list() == ["l1", "v1"]
    assert handler("query", sql, "--warehouse", str(seeded), "--format", "parquet") == 1  # needs --out
    assert handler("query", "SELECT 42 AS answer", "--warehouse", str(seeded)) == 0
    out = capsys.readouterr().out
    assert "42" in out and "1 row(s)" in out
    assert handler("query", "SELECT * FROM requests", "--warehouse", str(seeded), "--limit", "3") == 0
    out = capsys.readouterr().out
    assert "first 3 rows shown" in out and out.count("concurrency_sweep") == 3


def test_query_errors_are_explained(seeded: Path, tmp_path: Path, capsys) -> None:
    assert handler("query", "SELECT * FROM no_such_view", "--warehouse", str(seeded)) == 1
    assert "query failed" in capsys.readouterr().err
    assert handler("query", "SELECT 1", "--warehouse", str(tmp_path / "missing.duckdb")) == 1
    assert "no warehouse here yet" in capsys.readouterr().err


def test_export_writes_every_table(seeded: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "export"
    assert handler("export", "--parquet", str(out), "--warehouse", str(seeded)) == 0
    with Warehouse.open(seeded, read_only=True) as wh:
        tables = wh.table_names()
        expected = {t: wh.count(t) for t in tables}
    assert sorted(p.stem for p in out.glob("*.parquet")) == sorted(tables)
    for t, n in expected.items():
        assert pl.read_parquet(out / f"{t}.parquet").height == n, t
    assert pl.read_parquet(out / "requests.parquet").schema["event_offsets_ms"] == pl.List(pl.Float64)


def test_export_then_import_into_another_warehouse(seeded: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "export"
    assert handler("export", "--parquet", str(out), "--warehouse", str(seeded)) == 0
    other = tmp_path / "other.duckdb"
    with Warehouse.open(other) as wh:
        wh.load_run(make_run("local-only", engine="sglang"))
        wh.load_run(make_run("l1", requests_per_level=9))  # an older load of a run the export replaces
    # "l1" is here already: replacing it takes --replace, and without it nothing is imported
    assert handler("import", "--parquet", str(out), "--warehouse", str(other)) == 1
    assert "1 run(s) already in the warehouse: l1" in capsys.readouterr().err
    with Warehouse.open(other, read_only=True) as wh:
        assert sorted(wh.run_ids()) == ["l1", "local-only"] and wh.count("requests", "l1") == 9 * 2
    for _ in range(2):  # importing twice changes nothing
        assert handler("import", "--parquet", str(out), "--warehouse", str(other), "--replace") == 0
        with Warehouse.open(other, read_only=True) as wh:
            assert sorted(wh.run_ids()) == ["l1", "local-only", "v1"]
            assert wh.count("requests", "l1") == 8 and wh.count("requests") == 24
            assert wh.query_df("SELECT kernel FROM hosts").item() == "6.17.0"
    # rows of a run the export does not contain are refused, and nothing changes
    pl.read_parquet(out / "requests.parquet").with_columns(pl.lit("ghost").alias("run_id")).write_parquet(
        out / "requests.parquet"
    )
    assert handler("import", "--parquet", str(out), "--warehouse", str(other), "--replace") == 1
    assert "not in runs.parquet" in capsys.readouterr().err
    with Warehouse.open(other, read_only=True) as wh:
        assert wh.count("requests") == 24
