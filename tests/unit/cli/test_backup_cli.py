"""`strix backup` on a real DuckDB warehouse: the copy opens and holds the same rows as the warehouse,
it is made under the writer's lock after a checkpoint (a write-ahead log the file alone would lack is
in it), and retention keeps the newest N; the weekly Dagster job makes the same copy."""

from __future__ import annotations

import time

import duckdb
import pytest
from support.warehouse import make_run

from strix_pipeline.cli import main
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.backup import backups_of, dsn_env
from strix_pipeline.warehouse.errors import WarehouseError

TABLES = ("runs", "requests", "aggregates", "memory_samples", "images", "schema_version")


def counts(path) -> dict[str, int]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        con.close()


def seeded(path, n: int, first: int = 0) -> None:
    with Warehouse.open(path) as wh:
        for i in range(first, first + n):
            wh.load_run(make_run(f"backup-{path.stem}-{i}"))


def test_the_copy_opens_with_the_same_rows_and_retention_keeps_the_newest(tmp_path, capsys):
    path = tmp_path / "strix.duckdb"
    seeded(path, 2)
    to = tmp_path / "elsewhere"
    made = []
    for round_ in range(3):
        seeded(path, 1, first=10 + round_)  # the warehouse grows between copies
        assert main(["backup", "--warehouse", str(path), "--to", str(to), "--keep", "2"]) == 0
        err = capsys.readouterr().err
        assert err.startswith(f"backup {to}/strix-") and "bytes" in err, err
        made.append(backups_of(to, "strix", ".duckdb")[-1])
        time.sleep(0.01)
    left = backups_of(to, "strix", ".duckdb")
    assert left == made[1:], (left, made)  # the oldest removed
    assert "removed 1 older" in err and made[0].name in err
    assert not made[0].exists()
    assert counts(made[-1]) == counts(path) and counts(made[-1])["runs"] >= 3
    with Warehouse.open(made[-1], read_only=True) as copy:  # the project's reader opens it as it is
        assert (
            copy.query_df("SELECT count(*) AS n FROM v_run_base").to_dicts()[0]["n"] == counts(path)["runs"]
        )


def test_a_write_still_in_the_log_is_in_the_copy(tmp_path):
    """DuckDB keeps recent writes in the .wal beside the file; the checkpoint folds them in first."""
    path = tmp_path / "w.duckdb"
    seeded(path, 1)
    con = duckdb.connect(str(path))
    con.execute("SET checkpoint_threshold = '1TB'")  # stays in the log
    con.execute("PRAGMA disable_checkpoint_on_shutdown")  # and is not folded in at close
    con.execute("CREATE TABLE marker AS SELECT 42 AS x")
    con.close()
    assert path.with_name(path.name + ".wal").exists()  # the file alone would lack the marker
    assert main(["backup", "--warehouse", str(path), "--to", str(tmp_path / "b")]) == 0
    (copy,) = backups_of(tmp_path / "b", "w", ".duckdb")
    assert not copy.with_name(copy.name + ".wal").exists()
    assert duckdb.connect(str(copy), read_only=True).execute("SELECT x FROM marker").fetchall() == [(42,)]


def test_no_warehouse_nothing_to_back_up(tmp_path, capsys):
    assert main(["backup", "--warehouse", str(tmp_path / "none.duckdb")]) == 1
    assert "nothing to back up" in capsys.readouterr().err


def test_a_catalog_dsn_goes_to_libpq_s_environment_never_argv():
    assert dsn_env("host=db port=5432 dbname=strix user=strix password='p w\\'d'") == {
        "PGHOST": "db",
        "PGPORT": "5432",
        "PGDATABASE": "strix",
        "PGUSER": "strix",
        "PGPASSWORD": "p w'd",
    }
    with pytest.raises(WarehouseError):
        dsn_env("unknownkey=1")
