"""Sealed, third round: no name from the warehouse is formatted into SQL, and the view check holds views
and tables to the project's names as DuckDB resolves them (case-insensitively). Each on a real DuckDB
file and on a real DuckLake on the PostgreSQL test cluster, the writer a real `strix migrate` of
another process, the reader the Dagster resource's too:

1. A stored view whose name is SQL (``zz"; COPY (... read_text(secret) ...) TO 'pwned' ...; --``), its
   views hash removed: the next writer drops and re-creates the project's views by their own names,
   names the other view and leaves it alone; nothing of the name runs.
2. ``v_run_base`` dropped and re-created as ``"V_RUN_BASE"`` reading a local file, or a view ``"HOSTS"``
   where the project has the table ``hosts``: every reader refuses it by name (`strix decide`, `strix
   report`, the Dagster reader); a writer re-creates the project's view, or refuses the table's stand-in.
3. ``strix export`` of a warehouse holding a table named ``hosts") TO 'PWNED.sh' ... --``: the project's
   tables are exported, the other one named and left out; no file is written from its name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from support.ducklake import planting_connection, report_lake
from support.report_seed import report_config, report_warehouse

from assets.resources import WarehouseResource
from strix_pipeline.cli import common, main
from strix_pipeline.config import DuckLakeTarget
from strix_pipeline.warehouse import Warehouse, WarehouseError
from strix_pipeline.warehouse.schema import views_sql

STRIX = Path(sys.executable).parent / "strix"
SECRET = "strix-local-secret-52a7"


def q(s: str | Path) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIX_CONFIG", str(tmp_path / "absent.toml"))


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    p = tmp_path / "secret.txt"
    p.write_text(SECRET)
    return p


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(common, "load_config", lambda path=None: report_config())
    wh, _ = report_warehouse(tmp_path / "wh" / "w.duckdb")
    wh.close()
    return tmp_path / "wh" / "w.duckdb"


@pytest.fixture
def lake(postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return report_lake(postgres, tmp_path, monkeypatch, "names")


def _where(request: pytest.FixtureRequest, backend: str) -> tuple[Path | DuckLakeTarget, list[str]]:
    """The warehouse and the CLI words that reach it (--warehouse FILE, or --config of the lake)."""
    if backend == "file":
        path = request.getfixturevalue("seeded")
        return path, ["--warehouse", str(path)]
    target, config = request.getfixturevalue("lake")
    return target, ["--config", str(config)]


def _resource(backend: str, where: Path | DuckLakeTarget, words: list[str]) -> WarehouseResource:
    """The Dagster resource over the same warehouse (a lake through its configuration)."""
    if backend == "file":
        return WarehouseResource(path=str(where), lock_retry_s=1)
    return WarehouseResource(config_path=words[1], lock_retry_s=1)


def _cli(words: list[str], *argv: str) -> list[str]:
    """``strix [--config C] CMD [--warehouse W] ...``: --config goes before the command."""
    if words[0] == "--config":
        return [*words, *argv]
    return [argv[0], *words, *argv[1:]]


def _writer_of_another_process(words: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(STRIX), *_cli(words, "migrate")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env=os.environ.copy(),
    )


def _views(where: Path | DuckLakeTarget) -> list[str]:
    with Warehouse.open(where, read_only=True) as r:
        return [
            row[0]
            for row in r.con.execute(
                "SELECT view_name FROM duckdb_views() WHERE database_name = current_database() AND NOT "
                "internal"
            ).fetchall()
        ]


# ---- 1. a view whose name is SQL --------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["file", pytest.param("lake", marks=pytest.mark.postgres)])
def test_a_view_named_as_sql_is_left_alone_by_the_next_writer(
    request: pytest.FixtureRequest, backend: str, secret: Path, tmp_path: Path
) -> None:
    where, words = _where(request, backend)
    pwned = tmp_path / "pwned.csv"
    name = f'zz"; COPY (SELECT content FROM read_text({q(secret)})) TO {q(pwned)} (FORMAT csv); --'
    with Warehouse.open(where) as wh:  # any writer of the warehouse (on a lake: any Box's)
        wh.con.execute(f"CREATE VIEW {ident(name)} AS SELECT 1 AS one").fetchall()
        wh.con.execute("DELETE FROM schema_meta WHERE key = 'views_sha256'").fetchall()

    done = _writer_of_another_process(words, tmp_path)
    assert done.returncode == 0, done.stderr
    assert not pwned.exists(), "the view's name ran as SQL"
    assert "is not the project's; left alone" in done.stderr and "zz" in done.stderr
    assert name in _views(where) and "v_run_base" in _views(where)

    # and the Dagster resource's writer, in this process
    with _resource(backend, where, words).writer() as w:
        w.con.execute("DELETE FROM schema_meta WHERE key = 'views_sha256'").fetchall()
    with _resource(backend, where, words).writer():
        pass
    assert not pwned.exists()


# ---- 2. a project name under another case -----------------------------------------------------------


def _upper_base(con: duckdb.DuckDBPyConnection, secret: Path) -> None:
    base = views_sql().split("CREATE OR REPLACE VIEW v_run_base AS", 1)[1].split(";", 1)[0]
    evil = base.replace(
        "r.run_id,", f"r.run_id || (SELECT content FROM read_text({q(secret)})) AS run_id,", 1
    )
    assert evil != base
    con.execute("DROP VIEW v_run_base").fetchall()
    con.execute(f'CREATE VIEW "V_RUN_BASE" AS {evil}').fetchall()


@pytest.mark.parametrize("backend", ["file", pytest.param("lake", marks=pytest.mark.postgres)])
def test_a_project_view_under_another_case_is_refused_by_every_reader(
    request: pytest.FixtureRequest,
    backend: str,
    secret: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    where, words = _where(request, backend)
    with planting_connection(where) as con:
        _upper_base(con, secret)
        assert SECRET in str(con.execute("SELECT run_id FROM v_runs").fetchall())  # the plant works

    with pytest.raises(WarehouseError, match="V_RUN_BASE"):
        Warehouse.open(where, read_only=True)
    resource = _resource(backend, where, words)
    with pytest.raises(WarehouseError, match="V_RUN_BASE"), resource.reader():
        pass

    assert main(_cli(words, "decide", "--json")) != 0
    site = tmp_path / "site"
    assert main(_cli(words, "report", "--out", str(site))) != 0
    out = capsys.readouterr()
    assert "V_RUN_BASE" in out.err and SECRET not in out.out + out.err
    assert not site.exists() or SECRET not in "".join(
        p.read_text(errors="replace") for p in site.rglob("*") if p.is_file()
    )

    # a writer of another process re-creates the project's view, and readers read it again
    done = _writer_of_another_process(words, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "V_RUN_BASE" not in _views(where) and "v_run_base" in _views(where)
    with resource.reader() as r:
        assert SECRET not in str(r.query_df("SELECT run_id FROM v_runs").rows())


@pytest.mark.parametrize("backend", ["file", pytest.param("lake", marks=pytest.mark.postgres)])
def test_a_view_standing_for_a_project_table_under_another_case_is_refused(
    request: pytest.FixtureRequest, backend: str, secret: Path, tmp_path: Path
) -> None:
    where, words = _where(request, backend)
    with planting_connection(where) as con:
        con.execute("DROP TABLE hosts").fetchall()
        con.execute(f'CREATE VIEW "HOSTS" AS SELECT content AS name FROM read_text({q(secret)})').fetchall()
    with pytest.raises(WarehouseError, match="HOSTS"):
        Warehouse.open(where, read_only=True)
    resource = _resource(backend, where, words)
    with pytest.raises(WarehouseError, match="HOSTS"), resource.reader():
        pass
    done = _writer_of_another_process(words, tmp_path)
    assert done.returncode != 0 and "'HOSTS' is a view in the warehouse" in done.stderr
    assert "its views are the project's" not in done.stderr and SECRET not in done.stderr + done.stdout


# ---- 3. a table whose name is SQL, exported ---------------------------------------------------------


@pytest.mark.parametrize("backend", ["file", pytest.param("lake", marks=pytest.mark.postgres)])
def test_export_leaves_out_a_table_named_as_sql(
    request: pytest.FixtureRequest, backend: str, tmp_path: Path
) -> None:
    where, words = _where(request, backend)
    name = "hosts\") TO 'PWNED.sh' (FORMAT csv, HEADER false) --"
    with Warehouse.open(where) as wh:
        wh.con.execute(f"CREATE TABLE {ident(name)} AS SELECT 1 AS one").fetchall()
    work = tmp_path / "cwd"
    work.mkdir()
    out = tmp_path / "export"
    done = subprocess.run(
        [str(STRIX), *_cli(words, "export", "--parquet", str(out))],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=180,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr
    assert os.listdir(work) == [], "a file was written from the table's name"
    assert (out / "runs.parquet").is_file() and (out / "hosts.parquet").is_file()
    assert "is not the project's; not exported" in done.stderr and "PWNED" in done.stderr
    assert not any("PWNED" in p.name for p in out.iterdir())


# ---- a writer reaches no file -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["file", pytest.param("lake", marks=pytest.mark.postgres)])
def test_a_writer_reaches_no_file_through_a_stored_view(
    request: pytest.FixtureRequest, backend: str, secret: Path, tmp_path: Path
) -> None:
    """A view that is not the project's is left alone by writers, and one that reads a file cannot
    read it in a writer's connection: a writer drops its file-system access once open, before it
    runs a migration, the view check or a load (the Dagster resource's writer too)."""
    where, words = _where(request, backend)
    with planting_connection(where) as con:
        con.execute(f"CREATE VIEW zz_leak AS SELECT content FROM read_text({q(secret)})").fetchall()
        con.execute("DELETE FROM schema_meta WHERE key = 'views_sha256'").fetchall()
        assert SECRET in str(con.execute("SELECT * FROM zz_leak").fetchall())  # the plant works
    writers = [lambda: Warehouse.open(where), _resource(backend, where, words).writer]
    for writer in writers:
        with writer() as wh:
            with pytest.raises(duckdb.PermissionException, match="disabled by configuration"):
                wh.con.execute("SELECT * FROM zz_leak").fetchall()
            with pytest.raises(duckdb.PermissionException):
                wh.con.execute(f"COPY (SELECT 1) TO {q(tmp_path / 'out.csv')}").fetchall()
            with pytest.raises(duckdb.Error, match="external access"):  # and it cannot be turned back on
                wh.con.execute("SET enable_external_access = true").fetchall()
    assert not (tmp_path / "out.csv").exists()
