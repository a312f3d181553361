"""`strix query` is read-only in every sense: it writes no file, reads nothing but the warehouse, attaches
no database, loads no extension and changes none of its own settings.

The boundary is DuckDB's own (``Warehouse.open(..., sandbox=True)``: enable_external_access=false, no
spill directory, no extension autoload, lock_configuration=true), not a check on the SQL text; these
tests try the ways around it through the CLI entry point, the console script and the function, and
check that export and import, which open their own connections, still work.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest
from conftest import need
from support.ducklake import CATALOG_ENV, strix_config
from support.warehouse import seed, start_holder, view_names

from strix_pipeline import warehouse as wmod
from strix_pipeline.cli import main
from strix_pipeline.warehouse import Warehouse, WarehouseLocked

TOKEN = "strix-sandbox-token-7f3a9c"
OUTSIDE_REFUSED = "reads the warehouse and nothing else"


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    path = tmp_path / "wh" / "w.duckdb"
    with Warehouse.open(path) as w:
        seed(w)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> dict[str, Path]:
    """Files a query must not read: outside the warehouse, beside it, and a DuckDB file of its own."""
    d = tmp_path / "outside"
    d.mkdir()
    csv = d / "secret.csv"
    csv.write_text(f"k,v\nsecret,{TOKEN}\n")
    pq = d / "secret.parquet"
    pl.DataFrame({"k": ["secret"], "v": [TOKEN]}).write_parquet(pq)
    js = d / "secret.json"
    js.write_text(f'{{"v": "{TOKEN}"}}\n')
    other = d / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute(f"CREATE TABLE s AS SELECT '{TOKEN}' AS v")
    con.close()
    return {"csv": csv, "parquet": pq, "json": js, "duckdb": other, "dir": d}


def strix(*argv: str) -> int:
    return main(list(argv))


def query(path: Path, sql: str, *extra: str) -> int:
    return strix("query", sql, "--warehouse", str(path), "--lock-wait", "1", *extra)


def fingerprint(path: Path) -> tuple[str, dict[str, int], list[str]]:
    """The file's bytes, every table's row count and the views: what "unchanged" means."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with Warehouse.open(path, read_only=True) as r:
        return digest, {t: r.count(t) for t in r.table_names()}, view_names(r)


def q(s: str | Path) -> str:
    return "'" + str(s).replace("'", "''") + "'"


# ---- writing files --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
@pytest.mark.parametrize("where", ["cwd", "tmp", "beside_warehouse", "spill_dir"])
def test_copy_to_a_file_is_refused_and_no_file_appears(
    seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, fmt: str, where: str
) -> None:
    monkeypatch.chdir(tmp_path)
    target = {
        "cwd": Path(f"x.{fmt}"),
        "tmp": tmp_path / f"x.{fmt}",
        "beside_warehouse": seeded.parent / f"x.{fmt}",
        # DuckDB lets a connection without external access use its own spill directory: it has none
        "spill_dir": Path(f"{seeded}.tmp") / f"x.{fmt}",
    }[where]
    if where == "spill_dir":
        target.parent.mkdir()
    rc = query(seeded, f"COPY (SELECT 42 AS answer) TO {q(target)} (FORMAT {fmt})")
    err = capsys.readouterr().err
    assert rc == 1
    assert OUTSIDE_REFUSED in err and "nothing was read or written" in err, err
    assert not (tmp_path / target).exists() and not target.exists()


def test_copy_of_a_table_and_export_database_write_nothing(seeded: Path, tmp_path: Path, capsys) -> None:
    before = fingerprint(seeded)
    for sql in (
        f"COPY runs TO {q(tmp_path / 'runs.csv')}",
        f"EXPORT DATABASE {q(tmp_path / 'dump')}",
        f"COPY runs FROM {q(tmp_path / 'nothing.csv')}",
    ):
        assert query(seeded, sql) == 1, sql
        assert OUTSIDE_REFUSED in capsys.readouterr().err
    assert not (tmp_path / "runs.csv").exists() and not (tmp_path / "dump").exists()
    assert fingerprint(seeded) == before


# ---- reading files --------------------------------------------------------------------------------


READERS = {
    "read_csv": "SELECT * FROM read_csv({csv})",
    "read_csv_auto": "SELECT * FROM read_csv_auto({csv})",
    "read_csv_list": "SELECT * FROM read_csv([{csv}])",
    "read_csv_file_url": "SELECT * FROM read_csv({csv_url})",
    "read_text": "SELECT content FROM read_text({csv})",
    "read_blob": "SELECT content FROM read_blob({csv})",
    "read_parquet": "SELECT * FROM read_parquet({parquet})",
    "parquet_metadata": "SELECT * FROM parquet_metadata({parquet})",
    "read_json": "SELECT * FROM read_json({json})",
    "sniff_csv": "SELECT * FROM sniff_csv({csv})",
    "replacement_scan": "SELECT * FROM {csv}",
    "glob": "SELECT * FROM glob({glob})",
    "passwd_csv": "SELECT * FROM read_csv('/etc/passwd', sep = ':')",
    "passwd_text": "SELECT content FROM read_text('/etc/passwd')",
    "etc_glob": "SELECT * FROM glob('/etc/*')",
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_reading_a_file_outside_the_warehouse_is_refused(
    seeded: Path, outside: dict[str, Path], capsys, name: str
) -> None:
    sql = READERS[name].format(
        csv=q(outside["csv"]),
        csv_url=q(f"file://{outside['csv']}"),
        parquet=q(outside["parquet"]),
        json=q(outside["json"]),
        glob=q(outside["dir"] / "*"),
    )
    for fmt in ("table", "csv"):
        rc = query(seeded, sql, "--format", fmt)
        out, err = capsys.readouterr()
        assert rc == 1, (sql, out)
        assert TOKEN not in out and "root:" not in out and "secret" not in out
        assert "query failed" in err or OUTSIDE_REFUSED in err, err


def test_a_file_beside_the_warehouse_is_outside_it_too(seeded: Path, capsys) -> None:
    beside = seeded.parent / "notes.txt"
    beside.write_text(TOKEN)
    assert query(seeded, f"SELECT content FROM read_text({q(beside)})") == 1
    out, err = capsys.readouterr()
    assert TOKEN not in out and OUTSIDE_REFUSED in err


def test_python_objects_of_the_process_are_not_scanned(seeded: Path) -> None:
    # DuckDB's replacement scan finds a DataFrame by name in the frame that calls .sql()
    secret_frame = pl.DataFrame({"v": [TOKEN]})  # noqa: F841
    with Warehouse.open(seeded, read_only=True, sandbox=True) as r:
        with pytest.raises(duckdb.Error, match="secret_frame"):
            r.con.sql("SELECT * FROM secret_frame").fetchall()


# ---- other databases, extensions ------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "ATTACH {db} AS other",
        "ATTACH {db} AS other (READ_ONLY)",
        "ATTACH {db}",
        "ATTACH {new} AS fresh",
    ],
)
def test_attach_of_an_existing_database_is_refused(
    seeded: Path, outside: dict[str, Path], capsys, sql: str
) -> None:
    assert outside["duckdb"].exists()
    fresh = outside["dir"] / "fresh.duckdb"
    rc = query(seeded, sql.format(db=q(outside["duckdb"]), new=q(fresh)))
    err = capsys.readouterr().err
    assert rc == 1
    assert OUTSIDE_REFUSED in err, err
    assert not fresh.exists()
    # and nothing of it is reachable afterwards (each query is a new, sandboxed connection)
    assert query(seeded, "SELECT v FROM other.s") == 1
    assert TOKEN not in capsys.readouterr().out


@pytest.mark.parametrize(
    "sql",
    [
        # a repository on loopback that answers nothing: even a broken sandbox sends no traffic out
        "INSTALL httpfs FROM 'http://127.0.0.1:9'",
        "FORCE INSTALL httpfs FROM 'http://127.0.0.1:9'",
        "LOAD httpfs",
        "LOAD '{ext}'",
    ],
)
def test_install_and_load_are_refused(seeded: Path, tmp_path: Path, capsys, sql: str) -> None:
    ext = tmp_path / "evil.duckdb_extension"
    ext.write_bytes(b"\0" * 64)
    rc = query(seeded, sql.format(ext=ext))
    err = capsys.readouterr().err
    assert rc == 1
    assert OUTSIDE_REFUSED in err, err


# ---- its own settings -----------------------------------------------------------------------------


SETTINGS = [
    "SET enable_external_access = true",
    "SET GLOBAL enable_external_access = true",
    "SET SESSION enable_external_access = true",
    "PRAGMA enable_external_access = true",
    "RESET enable_external_access",
    "SET lock_configuration = false",
    "RESET lock_configuration",
    "SET allowed_directories = ['/']",
    "SET allowed_paths = ['/etc/passwd']",
    "SET disabled_filesystems = ''",
    "SET temp_directory = '/tmp'",
    "SET autoload_known_extensions = true",
    "SET autoinstall_known_extensions = true",
    "SET memory_limit = '1TB'",
    "SET TimeZone = 'Asia/Tokyo'",
]


@pytest.mark.parametrize("sql", SETTINGS)
def test_changing_a_setting_is_refused(seeded: Path, capsys, sql: str) -> None:
    rc = query(seeded, sql)
    err = capsys.readouterr().err
    assert rc == 1
    assert "cannot change DuckDB settings" in err and "locked" in err, err


def test_settings_stay_put_on_the_connection_that_tried(seeded: Path, outside: dict[str, Path]) -> None:
    # Through the function: one connection, every attempt, then the sandbox is exactly as it was.
    with Warehouse.open(seeded, read_only=True, sandbox=True) as r:
        for sql in SETTINGS:
            with pytest.raises(duckdb.InvalidInputException, match="locked"):
                r.con.execute(sql)
        got = r.query_df(
            "SELECT current_setting('enable_external_access') AS ext, "
            "current_setting('lock_configuration') AS locked, current_setting('temp_directory') AS tmp, "
            "current_setting('autoload_known_extensions') AS autoload, "
            "current_setting('autoinstall_known_extensions') AS autoinstall, "
            "current_setting('TimeZone') AS tz"
        ).row(0, named=True)
        assert got == {
            "ext": False,
            "locked": True,
            "tmp": "",
            "autoload": False,
            "autoinstall": False,
            "tz": "UTC",
        }
        with pytest.raises(duckdb.PermissionException):
            r.query_df(f"SELECT * FROM read_csv({q(outside['csv'])})")


# ---- writes to the warehouse itself ---------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE t (a INT)",
        "CREATE VIEW v_evil AS SELECT 1",
        "INSERT INTO hosts (name) VALUES ('x')",
        "UPDATE runs SET status = 'ok'",
        "DELETE FROM requests",
        "DROP TABLE runs",
        "DROP VIEW v_runs",
        "ALTER TABLE runs ADD COLUMN evil INT",
        f"COPY (SELECT 1) TO {q('w.duckdb')}",
    ],
)
def test_write_statements_are_refused_and_the_warehouse_is_unchanged(
    seeded: Path, monkeypatch: pytest.MonkeyPatch, capsys, sql: str
) -> None:
    monkeypatch.chdir(seeded.parent)
    before = fingerprint(seeded)
    rc = query(seeded, sql)
    err = capsys.readouterr().err
    assert rc == 1
    # COPY onto the warehouse file: DuckDB 1.5 refuses the file access before the read-only write
    assert "nothing was changed" in err or "query failed" in err or OUTSIDE_REFUSED in err, err
    assert fingerprint(seeded) == before


# ---- what must keep working -----------------------------------------------------------------------


def test_every_view_works_in_the_sandbox(seeded: Path) -> None:
    with Warehouse.open(seeded, read_only=True, sandbox=True) as r:
        views = view_names(r)
        assert {"v_runs", "v_latest_by_engine", "v_compare", "v_memory"} <= set(views)
        for v in views:
            r.query_df(f'SELECT * FROM "{v}"')  # raises if a view needs a file or an extension
        assert r.query_df("SELECT count(*) AS n FROM v_runs").item() == 5


def test_a_normal_select_over_a_view_works(seeded: Path, capsys) -> None:
    rc = query(seeded, "SELECT run_id, engine FROM v_runs ORDER BY run_id", "--format", "csv")
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.splitlines() == [
        "run_id,engine",
        "l1,llamacpp",
        "l2,llamacpp",
        "v1,vllm",
        "v2,vllm",
        "v3,vllm",
    ]
    assert query(seeded, "SELECT * FROM v_latest_by_engine") == 0


def test_the_documented_compare_with_variables_still_works(seeded: Path, capsys) -> None:
    # docs/warehouse.md: SET VARIABLE is a value of the session, not a setting, and stays allowed
    sql = (
        "SET VARIABLE a = (SELECT run_id FROM v_latest_by_engine WHERE engine = 'llamacpp'); "
        "SET VARIABLE b = (SELECT run_id FROM v_latest_by_engine WHERE engine = 'vllm'); "
        "SELECT DISTINCT a_run_id, b_run_id FROM v_compare "
        "WHERE a_run_id = getvariable('a') AND b_run_id = getvariable('b')"
    )
    rc = query(seeded, sql, "--format", "csv")
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.splitlines() == ["a_run_id,b_run_id", "l2,v2"]


def test_query_output_file_is_written_by_strix_not_by_the_sql(seeded: Path, tmp_path: Path, capsys) -> None:
    # --out is the user's own choice of file and is written by Python after the query ran
    out = tmp_path / "runs.parquet"
    assert query(seeded, "SELECT run_id FROM v_runs", "--format", "parquet", "--out", str(out)) == 0
    assert pl.read_parquet(out).height == 5


def test_export_and_import_still_work(seeded: Path, tmp_path: Path, capsys) -> None:
    # a refused query first, in the same process: the sandbox must not stay on the file's instance
    assert query(seeded, f"COPY runs TO {q(tmp_path / 'x.csv')}") == 1
    capsys.readouterr()
    out = tmp_path / "export"
    assert strix("export", "--parquet", str(out), "--warehouse", str(seeded)) == 0
    with Warehouse.open(seeded, read_only=True) as r:
        tables = r.table_names()
    assert set(wmod.RECORD_TABLES) <= set(tables)
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{t}.parquet" for t in tables)
    assert pl.read_parquet(out / "runs.parquet").height == 5
    other = tmp_path / "other.duckdb"
    assert strix("import", "--parquet", str(out), "--warehouse", str(other)) == 0
    with Warehouse.open(other, read_only=True) as r:
        assert r.count("runs") == 5
    capsys.readouterr()


def test_through_the_console_script(seeded: Path, tmp_path: Path, outside: dict[str, Path]) -> None:
    script = Path(sys.executable).parent / "strix"
    need(
        script.exists(),
        f"the strix console script beside {sys.executable}",
        "pip install -e . (make test does this)",
    )

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *argv, "--warehouse", str(seeded)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )

    r = run("query", "COPY (SELECT 42) TO 'x.csv'")
    assert r.returncode == 1 and OUTSIDE_REFUSED in r.stderr, r.stderr
    assert not (tmp_path / "x.csv").exists()
    r = run("query", "SELECT * FROM read_csv('/etc/passwd')")
    assert r.returncode == 1 and "root:" not in r.stdout
    r = run("query", f"ATTACH {q(outside['duckdb'])} AS o")
    assert r.returncode == 1 and OUTSIDE_REFUSED in r.stderr
    r = run("query", "SET enable_external_access = true")
    assert r.returncode == 1 and "cannot change DuckDB settings" in r.stderr
    r = run("query", "SELECT count(*) AS n FROM v_runs", "--format", "json")
    assert r.returncode == 0 and '"n": 5' in r.stdout, r.stderr
    r = run("export", "--parquet", str(tmp_path / "exp"))
    assert r.returncode == 0 and (tmp_path / "exp" / "runs.parquet").exists(), r.stderr


# ---- the sandbox and the other connections of a process ---------------------------------------------


def test_the_sandbox_is_never_shared_with_a_plain_connection(seeded: Path) -> None:
    # DuckDB has one instance per file and process: a sandboxed open beside a plain reader is refused
    # (it would otherwise get the plain instance), and the other way round the plain reader is refused.
    with Warehouse.open(seeded, read_only=True) as plain:
        with pytest.raises(WarehouseLocked, match="sandboxed"):
            Warehouse.open(seeded, read_only=True, sandbox=True, lock_retry_s=0.2)
        assert plain.count("runs") == 5
    with Warehouse.open(seeded, read_only=True, sandbox=True) as box:
        with pytest.raises(WarehouseLocked):
            Warehouse.open(seeded, read_only=True, lock_retry_s=0.2)
        with pytest.raises(WarehouseLocked, match="sandboxed reader"):
            Warehouse.open(seeded, read_only=True, sandbox=True, lock_retry_s=0.2)
        assert box.count("runs") == 5
    # once closed, a plain reader is plain again: export COPYs files
    with Warehouse.open(seeded, read_only=True) as plain:
        assert plain.query_df("SELECT current_setting('enable_external_access') AS e").item() is True
        plain.export_parquet(seeded.parent / "exp", ["runs"])
    assert (seeded.parent / "exp" / "runs.parquet").exists()


def test_a_sandbox_is_read_only_or_nothing(seeded: Path) -> None:
    with pytest.raises(ValueError, match="read-only"):
        Warehouse.open(seeded, sandbox=True)


def test_a_sandboxed_reader_still_waits_for_a_writer(seeded: Path) -> None:
    proc = start_holder(seeded, hold=1.5)
    try:
        t = time.monotonic()
        told: list[str] = []
        with Warehouse.open(seeded, read_only=True, sandbox=True, lock_retry_s=20, on_wait=told.append) as r:
            waited = time.monotonic() - t
            ids = r.run_ids()
        assert 0.5 <= waited < 15
        assert "from-writer" in ids
        assert len(told) == 1 and "held by a writer" in told[0]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_warehouse_file_is_not_touched_by_a_query(seeded: Path) -> None:
    before = fingerprint(seeded)
    mtime = os.stat(seeded).st_mtime_ns
    assert query(seeded, "SELECT count(*) FROM requests") == 0
    assert query(seeded, "CHECKPOINT") in (0, 1)
    assert os.stat(seeded).st_mtime_ns == mtime
    assert fingerprint(seeded) == before


# ---- the shared warehouse (DuckLake) ------------------------------------------------------------


@pytest.mark.postgres
def test_the_sandbox_holds_on_a_ducklake_warehouse(
    postgres, tmp_path: Path, outside: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # The lake's ATTACH (extension files, PostgreSQL) happens before the lock; after it the SQL reads
    # the lake's own data files and catalog, and nothing else, exactly as on the file.

    from strix_pipeline.config import DuckLakeTarget

    db = postgres.create_database("sandbox_lake")
    lake = DuckLakeTarget(catalog_dsn=postgres.dsn(db), data_path=tmp_path / "lake", catalog_env=CATALOG_ENV)
    with Warehouse.open(lake) as w:
        seed(w)
    config = strix_config(tmp_path, lake)
    monkeypatch.setenv(CATALOG_ENV, lake.catalog_dsn)

    def lake_query(sql: str, *extra: str) -> tuple[int, str, str]:
        rc = strix("--config", str(config), "query", sql, *extra)
        out = capsys.readouterr()
        return rc, out.out, out.err

    def snapshot() -> tuple[int, dict[str, int]]:
        with Warehouse.open(lake, read_only=True) as r:
            n = r.con.execute("SELECT count(*) FROM strix_lake.snapshots()").fetchall()[0][0]
            return n, {t: r.count(t) for t in r.table_names()}

    before = snapshot()
    rc, out, err = lake_query("SELECT count(*) AS n FROM v_runs", "--format", "json")
    assert rc == 0 and '"n": 5' in out, err
    for sql in (
        f"SELECT * FROM read_csv({q(outside['csv'])})",
        f"SELECT * FROM read_parquet({q(outside['parquet'])})",
        f"ATTACH {q(outside['duckdb'])} AS o",
        f"COPY (SELECT * FROM runs) TO {q(tmp_path / 'x.csv')}",
        "ATTACH 'ducklake:postgres:dbname=postgres host=127.0.0.1' AS y",
    ):
        rc, out, err = lake_query(sql)
        assert rc == 1 and OUTSIDE_REFUSED in err and TOKEN not in out, (sql, err)
    assert not (tmp_path / "x.csv").exists()
    for sql in ("INSERT INTO runs SELECT * FROM runs", "DELETE FROM requests", "DROP VIEW v_runs"):
        rc, _, err = lake_query(sql)
        assert rc == 1 and "read-only" in err, (sql, err)
    # no PostgreSQL connection at all: the postgres extension is not loaded in a query
    rc, _, err = lake_query(
        "CALL postgres_execute('__ducklake_metadata_strix_lake', 'DROP TABLE ducklake_snapshot')"
    )
    assert rc == 1 and OUTSIDE_REFUSED in err, err
    rc, _, err = lake_query("CALL ducklake_expire_snapshots('strix_lake', older_than => now())")
    assert rc == 1, err
    for sql in (
        "SET enable_external_access = true",
        "RESET lock_configuration",
        "SET allowed_directories = ['/']",
    ):
        rc, _, err = lake_query(sql)
        assert rc == 1 and "cannot change DuckDB settings" in err, (sql, err)
    rc, _, err = lake_query("LOAD httpfs")
    assert rc == 1 and OUTSIDE_REFUSED in err, err
    assert snapshot() == before
