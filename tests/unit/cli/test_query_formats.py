"""`strix query` keeps the DuckDB CLI's habits: csv, json, jsonl, markdown and line
output, and a table that hides middle columns of a wide result (behind one `…` column, as duckbox does)
instead of switching to another shape. Through the real CLI entry point, on a seeded warehouse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.warehouse import seed

from strix_pipeline.cli import main
from strix_pipeline.cli.formats import MAX_CELL, render, shown_columns
from strix_pipeline.warehouse import Warehouse

SMALL = (
    "SELECT run_id, engine, held_gib, memory_returned, failure_reason FROM v_runs "
    "WHERE run_id IN ('l1', 'v3') ORDER BY run_id"
)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wh") / "w.duckdb"
    with Warehouse.open(path) as w:
        seed(w)
    return path


def query(path: Path, sql: str, *extra: str) -> int:
    return main(["query", sql, "--warehouse", str(path), "--lock-wait", "1", *extra])


def out_of(capsys, path: Path, sql: str, *extra: str) -> str:
    rc = query(path, sql, *extra)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def test_csv_json_and_jsonl(seeded: Path, capsys) -> None:
    assert out_of(capsys, seeded, SMALL, "--format", "csv").splitlines() == [
        "run_id,engine,held_gib,memory_returned,failure_reason",
        "l1,llamacpp,20.0,true,",
        "v3,vllm,20.0,true,did not start",
    ]
    rows = [
        {
            "run_id": "l1",
            "engine": "llamacpp",
            "held_gib": 20.0,
            "memory_returned": True,
            "failure_reason": None,
        },
        {
            "run_id": "v3",
            "engine": "vllm",
            "held_gib": 20.0,
            "memory_returned": True,
            "failure_reason": "did not start",
        },
    ]
    assert json.loads(out_of(capsys, seeded, SMALL, "--format", "json")) == rows
    jsonl = out_of(capsys, seeded, SMALL, "--format", "jsonl")
    assert jsonl.endswith("\n") and [json.loads(line) for line in jsonl.splitlines()] == rows


def test_markdown_is_a_github_table(seeded: Path, capsys) -> None:
    assert out_of(capsys, seeded, SMALL, "--format", "markdown").splitlines() == [
        "| run_id | engine   | held_gib | memory_returned | failure_reason |",
        "|--------|----------|---------:|-----------------|----------------|",
        "| l1     | llamacpp |     20.0 | true            |                |",
        "| v3     | vllm     |     20.0 | true            | did not start  |",
    ]
    # a pipe or a line break inside a value never breaks the table
    md = out_of(
        capsys,
        seeded,
        "SELECT 'a|b' AS x, 'one' || chr(10) || 'two' AS y, [1, 2] AS z",
        "--format",
        "markdown",
    )
    assert md.splitlines()[2] == r"| a\|b | one<br>two | [1, 2] |"


def test_line_is_duckdb_line_mode(seeded: Path, capsys) -> None:
    assert out_of(capsys, seeded, SMALL, "--format", "line") == (
        "         run_id = l1\n"
        "         engine = llamacpp\n"
        "       held_gib = 20.0\n"
        "memory_returned = true\n"
        " failure_reason = NULL\n"
        "\n"
        "         run_id = v3\n"
        "         engine = vllm\n"
        "       held_gib = 20.0\n"
        "memory_returned = true\n"
        " failure_reason = did not start\n"
        "\n"
    )


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl", "markdown", "line"])
def test_every_text_format_writes_out_and_gives_every_row(
    seeded: Path, tmp_path: Path, capsys, fmt: str
) -> None:
    target = tmp_path / f"q.{fmt}"
    sql = "SELECT run_id FROM v_runs ORDER BY run_id"
    assert query(seeded, sql, "--format", fmt, "--out", str(target), "--limit", "1") == 0
    assert "5 rows ->" in capsys.readouterr().err
    text = target.read_text()
    for rid in ("l1", "l2", "v1", "v2", "v3"):  # --limit is the table's, not the files'
        assert rid in text, (fmt, text)


def test_empty_results(seeded: Path, capsys) -> None:
    sql = "SELECT run_id, engine FROM v_runs WHERE false"
    assert out_of(capsys, seeded, sql, "--format", "jsonl") == ""
    assert out_of(capsys, seeded, sql, "--format", "line") == ""
    assert json.loads(out_of(capsys, seeded, sql, "--format", "json")) == []
    assert out_of(capsys, seeded, sql, "--format", "markdown").splitlines()[0] == "| run_id | engine |"
    assert "0 row(s)" in out_of(capsys, seeded, sql)


def test_a_wide_table_hides_middle_columns_and_keeps_its_shape(
    seeded: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = out_of(capsys, seeded, "SELECT * FROM v_runs ORDER BY run_id")
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(map(len, lines))
    header = lines[1]
    # the first and the last columns, the hidden ones behind one "…" column; one row per line
    assert "run_id" in header and "dagster_run_id" in header and "…" in header
    assert "memory_returned" not in header
    assert "row 1" not in out  # never the one-block-per-row shape
    body = [line for line in lines if line.startswith("│")]
    assert len(body) == 5 and [b.split("│")[1].strip() for b in body] == ["l1", "l2", "v1", "v2", "v3"]

    with Warehouse.open(seeded, read_only=True) as wh:
        width = len(wh.query_df("SELECT * FROM v_runs LIMIT 0").columns)
    assert f"5 row(s); {width} columns" in out and "--format line shows every column" in out
    # DuckDB's column types under the names
    assert "varchar" in lines[2]


def test_a_narrow_result_is_shown_whole(seeded: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    out = out_of(capsys, seeded, SMALL)
    assert "…" not in out and "memory_returned" in out and "did not start" in out
    assert "2 row(s)" in out and "columns" not in out.splitlines()[-1]


def test_long_values_are_cut_not_folded(seeded: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = out_of(capsys, seeded, "SELECT repeat('x', 100) AS long, 'short' AS s")
    row = next(line for line in out.splitlines() if "short" in line)
    assert "x" * (MAX_CELL - 1) + "…" in row and "x" * MAX_CELL not in row
    # the whole value is one --format away
    assert "x" * 100 in out_of(capsys, seeded, "SELECT repeat('x', 100) AS long", "--format", "line")


def test_table_takes_no_out(seeded: Path, tmp_path: Path, capsys) -> None:
    assert query(seeded, SMALL, "--out", str(tmp_path / "x.txt")) == 1
    assert "--format table prints to the terminal" in capsys.readouterr().err
    assert not (tmp_path / "x.txt").exists()


def test_the_sandbox_holds_in_every_format(seeded: Path, tmp_path: Path, capsys) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("k\nsecret-token\n")
    for fmt in ("markdown", "line", "jsonl"):
        assert query(seeded, f"SELECT * FROM read_csv('{secret}')", "--format", fmt) == 1
        out, err = capsys.readouterr()
        assert "secret-token" not in out and "reads the warehouse and nothing else" in err


def test_shown_columns_alternates_from_both_ends() -> None:
    assert shown_columns([5, 5, 5], 80) == ([0, 1, 2], [])
    # 10 columns of 10 (13 each with borders) in 60: the left edge and "…" leave 55 -> 4 columns
    assert shown_columns([10] * 10, 60) == ([0, 1], [8, 9])
    # one column wider than the screen still shows (the table cuts it)
    assert shown_columns([500, 3], 40) == ([0], [])


def test_render_rejects_unknown_formats() -> None:
    import polars as pl

    with pytest.raises(ValueError):
        render(pl.DataFrame({"a": [1]}), "xml")
