"""Every reader of a DuckLake's stored views is sealed as `strix query` is, once the lake is attached.

The view check is the first wall (a stored view not the project's is refused by name). These tests take
it away -- as a view that ever got past it would -- and plant, on a real DuckLake whose catalog is on
the PostgreSQL test cluster, ``v_run_base`` redefined to read a local file (under its own name and
under another case, ``"V_RUN_BASE"``), or a view ``"HOSTS"`` standing for the table ``hosts``. Then
each reader runs as a person runs it (`strix decide`, `strix report`, `strix export`, `strix changes`,
the charts and the weekly report through the Dagster resource's reader, a plain read-only open): the
connection it opened reads the view and gets no file (DuckDB refuses it), the reader fails or publishes
nothing of the file, and the lake's own data files still read.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from support.ducklake import planting_connection, report_lake
from support.sealed_reads import Reads

from assets.resources import WarehouseResource
from strix_pipeline.analysis.charts import support_matrix_rows, write_charts
from strix_pipeline.cli import main
from strix_pipeline.config_load import load_config
from strix_pipeline.report import write_report
from strix_pipeline.warehouse import Warehouse, WarehouseError
from strix_pipeline.warehouse.schema import views_sql

pytestmark = pytest.mark.postgres

SECRET = "strix-lake-secret-5e1d"


def q(s: str | Path) -> str:
    return "'" + str(s).replace("'", "''") + "'"


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIX_CONFIG", str(tmp_path / "absent.toml"))


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    p = tmp_path / "secret.txt"
    p.write_text(SECRET)
    return p


@pytest.fixture
def lake(postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return report_lake(postgres, tmp_path, monkeypatch, "sealed_readers")


def _hostile_base(con: duckdb.DuckDBPyConnection, secret: Path, name: str) -> None:
    base = views_sql().split("CREATE OR REPLACE VIEW v_run_base AS", 1)[1].split(";", 1)[0]
    evil = base.replace(
        "r.run_id,", f"r.run_id || (SELECT content FROM read_text({q(secret)})) AS run_id,", 1
    )
    assert evil != base
    con.execute("DROP VIEW v_run_base").fetchall()
    con.execute(f'CREATE VIEW "{name}" AS {evil}').fetchall()


def _hostile_hosts(con: duckdb.DuckDBPyConnection, secret: Path) -> None:
    cols = [r[0] for r in con.execute("DESCRIBE hosts").fetchall()]
    first, rest = cols[0], cols[1:]
    con.execute("CREATE TABLE hosts_kept AS SELECT * FROM hosts").fetchall()
    con.execute("DROP TABLE hosts").fetchall()
    select = ", ".join(
        [f"(SELECT content FROM read_text({q(secret)})) AS {first}", *(f"h.{c}" for c in rest)]
    )
    con.execute(f'CREATE VIEW "HOSTS" AS SELECT {select} FROM hosts_kept h').fetchall()


def _files_text(root: Path) -> str:
    if not root.exists():
        return ""
    return "".join(p.read_bytes().decode(errors="replace") for p in root.rglob("*") if p.is_file())


PLANTS = ["v_run_base", "V_RUN_BASE", "HOSTS"]


def _plant(target, secret: Path, plant: str) -> None:
    with planting_connection(target) as con:
        if plant == "HOSTS":
            _hostile_hosts(con, secret)
        else:
            _hostile_base(con, secret, plant)
        # the plant works for a connection that may read files
        assert SECRET in str(con.execute("SELECT run_id FROM v_runs").fetchall()) + str(
            con.execute("SELECT * FROM hosts").fetchall()
        )


@pytest.mark.parametrize("plant", PLANTS[1:])
@pytest.mark.parametrize(
    "command",
    [
        ["decide", "--json"],
        ["changes", "--json"],
        ["report", "--out", "{tmp}/site"],
        ["export", "--parquet", "{tmp}/export"],
    ],
    ids=["decide", "changes", "report", "export"],
)
def test_a_cli_reader_of_the_lake_reads_no_file_through_a_stored_view(
    lake, secret: Path, tmp_path: Path, plant: str, command: list[str], monkeypatch, capsys
) -> None:
    target, config = lake
    _plant(target, secret, plant)
    reads = Reads(monkeypatch, SECRET)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    rc = main(["--config", str(config), *argv])
    out = capsys.readouterr()
    reads.assert_sealed()
    assert SECRET not in out.out + out.err
    assert SECRET not in _files_text(tmp_path / "site") + _files_text(tmp_path / "export")
    if plant != "HOSTS" and argv[0] in ("decide", "report"):
        # they read v_run_base, which DuckDB refused: no answer, no site, one line saying so
        assert rc != 0 and "could not read the warehouse" in out.err


@pytest.mark.parametrize("plant", PLANTS)
def test_the_dagster_readers_of_the_lake_read_no_file_through_a_stored_view(
    lake, secret: Path, tmp_path: Path, plant: str, monkeypatch
) -> None:
    target, config = lake
    _plant(target, secret, plant)
    reads = Reads(monkeypatch, SECRET)
    resource = WarehouseResource(config_path=str(config), lock_retry_s=1)
    strix = load_config(config)
    charts, site = tmp_path / "charts", tmp_path / "report"
    for work in (
        lambda wh: (write_charts(wh, charts), support_matrix_rows(wh)),  # trend_charts
        lambda wh: write_report(wh, strix, site),  # weekly_report
        lambda wh: wh.query_df("SELECT run_id FROM v_runs"),
    ):
        try:
            with resource.reader() as wh:
                got = work(wh)
        except (duckdb.Error, WarehouseError) as e:
            got = e
        assert SECRET not in str(got)
    reads.assert_sealed()
    assert SECRET not in _files_text(charts) + _files_text(site)


@pytest.mark.parametrize("plant", PLANTS)
def test_a_plain_read_only_open_of_the_lake_reads_no_file(
    lake, secret: Path, plant: str, monkeypatch
) -> None:
    target, _ = lake
    _plant(target, secret, plant)
    reads = Reads(monkeypatch, SECRET)
    with Warehouse.open(target, read_only=True) as wh:
        for sql in (
            f"SELECT content FROM read_text({q(secret)})",
            f"COPY (SELECT 1) TO {q(target.data_path / 'planted.csv')}",
            f"ATTACH {q(target.data_path / 'other.duckdb')} AS other",
        ):
            with pytest.raises(duckdb.Error, match="disabled|read-only"):
                wh.con.execute(sql).fetchall()
        with pytest.raises(duckdb.Error, match="locked"):
            wh.con.execute("SET disabled_filesystems = ''").fetchall()
        assert wh.count("runs") > 0  # the data files read, through the read-only file system
    reads.assert_sealed()
    assert not (target.data_path / "planted.csv").exists()
