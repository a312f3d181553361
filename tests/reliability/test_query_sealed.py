"""`strix query` sealed for real: what got through the first, read-only sandbox, each on a real
DuckDB file or a real DuckLake on the PostgreSQL test cluster.

1. DuckLake: no write to the lake's data files, no postgres_* function, no DSN (password) in any output.
2. File: no write to the warehouse's WAL files (a committed, not yet checkpointed row survives).
3. ``--out`` is never the warehouse, its WAL, the spool or the configuration; an existing file only
   with ``--force``; a directory or a missing parent is one line, no traceback.
5. A default ``--timeout``; a writer told that a query holds the file (and which); ``--memory-limit``.
7. Control characters in strings are shown escaped by table/csv/markdown/line (a real pty for table).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import need
from support.ducklake import CATALOG_ENV, strix_config
from support.warehouse import seed

from strix_pipeline.cli import main
from strix_pipeline.config import DEFAULT_CONFIG, DuckLakeTarget, QueryConfig
from strix_pipeline.warehouse import Warehouse, WarehouseLocked

TOKEN = "strix-sealed-password-5e1d"
STRIX = Path(sys.executable).parent / "strix"


def q(s: str | Path) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    path = tmp_path / "wh" / "w.duckdb"
    with Warehouse.open(path) as w:
        seed(w)
    return path


def query(path: Path, sql: str, *extra: str) -> int:
    return main(["query", sql, "--warehouse", str(path), "--lock-wait", "1", *extra])


# ---- 1. DuckLake ----------------------------------------------------------------------------------


@pytest.fixture
def lake(postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A seeded lake whose DSN carries a password (trust auth ignores it; a leak would show it)."""

    db = postgres.create_database(f"sealed_{os.getpid()}_{time.monotonic_ns() % 10**9}")
    target = DuckLakeTarget(
        catalog_dsn=postgres.dsn(db) + f" password={TOKEN}",
        data_path=tmp_path / "lake",
        catalog_env=CATALOG_ENV,
    )
    with Warehouse.open(target) as w:
        seed(w)
        # a table big enough to be written as a Parquet file, not inlined in the catalog
        w.con.execute("CREATE TABLE bulk AS SELECT range AS i, 'v' || range AS s FROM range(20000)")
    monkeypatch.setenv(CATALOG_ENV, target.catalog_dsn)
    config = strix_config(tmp_path, target)
    return target, config, postgres, db


def lake_query(config: Path, capsys, sql: str, *extra: str) -> tuple[int, str, str]:
    rc = main(["--config", str(config), "query", sql, *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.postgres
def test_lake_data_files_cannot_be_written_by_a_query(lake, capsys) -> None:
    target, config, _, _ = lake
    files = sorted(target.data_path.rglob("*.parquet"))
    assert files, "the seed wrote no Parquet file"
    before = {f: sha(f) for f in files}
    runs = next((f for f in files if "runs" in f.parts), files[0])
    for sql in (
        # the rewrite of shared data in place, by every name the data file has
        f"COPY (SELECT * FROM read_parquet({q(runs)})) TO {q(runs)} (FORMAT parquet)",
        f"COPY (SELECT 1 AS x) TO {q(runs)} (FORMAT parquet, USE_TMP_FILE false)",
        f"COPY (SELECT 1 AS x) TO {q('strixlake://' + str(runs))} (FORMAT parquet)",
        f"COPY (SELECT 1 AS x) TO {q(target.data_path / 'main' / 'new.parquet')} (FORMAT parquet)",
        f"COPY (SELECT 1 AS x) TO {q('strixlake://' + str(target.data_path) + '/new.parquet')} (FORMAT "
        "parquet)",
    ):
        rc, out, err = lake_query(config, capsys, sql)
        assert rc == 1, (sql, out, err)
    assert {f: sha(f) for f in target.data_path.rglob("*.parquet")} == before
    rc, out, err = lake_query(config, capsys, "SELECT count(*) AS n FROM bulk", "--format", "csv")
    assert rc == 0 and out.splitlines() == ["n", "20000"], err
    rc, out, err = lake_query(config, capsys, "SELECT count(*) AS n FROM v_runs", "--format", "csv")
    assert rc == 0 and out.splitlines() == ["n", "5"], err


@pytest.mark.postgres
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM postgres_query('__ducklake_metadata_strix_lake', 'SELECT "
        "pg_read_file(''/etc/hostname'')')",
        "SELECT * FROM postgres_query('__ducklake_metadata_strix_lake', 'SELECT rolname FROM pg_authid')",
        "SELECT * FROM postgres_scan({dsn}, 'pg_catalog', 'pg_authid')",
        "CALL postgres_execute('__ducklake_metadata_strix_lake', 'SELECT 1')",
        "SELECT * FROM postgres_attach({dsn})",
        "CALL postgres_configure_pool(catalog_name => '__ducklake_metadata_strix_lake', max_connections => "
        "1)",
        "ATTACH {dsn} AS pg (TYPE postgres, READ_ONLY)",
    ],
)
def test_lake_query_has_no_postgres_function(lake, capsys, sql: str) -> None:
    target, config, postgres, _ = lake
    plain = postgres.dsn("postgres")
    rc, out, err = lake_query(config, capsys, sql.format(dsn=q(plain)))
    assert rc == 1, (out, err)
    assert "postgres" not in out and "rolname" not in out, out


@pytest.mark.postgres
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM duckdb_databases()",
        "PRAGMA database_list",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM strix_lake.options()",
        "SELECT * FROM ducklake_settings('strix_lake')",
        "SELECT current_setting('allowed_paths') AS p, current_setting('allowed_directories') AS d",
        "SELECT * FROM duckdb_secrets()",
        "SELECT * FROM no_such_table",
        "SELECT * FROM strix_lake.__ducklake_metadata_strix_lake.ducklake_metadata",
    ],
)
def test_lake_query_shows_no_dsn(lake, capsys, sql: str) -> None:
    target, config, _, _ = lake
    for fmt in ("csv", "json", "line"):
        rc, out, err = lake_query(config, capsys, sql, "--format", fmt)
        assert TOKEN not in out and TOKEN not in err, (sql, fmt)
        assert f"port={target.catalog_dsn.split('port=')[1].split()[0]}" not in out + err


@pytest.mark.postgres
def test_a_read_only_role_is_enough_for_a_lake_query(lake, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/security.md's reader role: SELECT on the catalog's tables, nothing else

    target, config, postgres, db = lake
    postgres.psql(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'strix_reader') THEN "
        "CREATE ROLE strix_reader LOGIN; END IF; END $$"
    )
    postgres.psql(
        f'GRANT CONNECT ON DATABASE "{db}" TO strix_reader; GRANT USAGE ON SCHEMA public TO strix_reader; '
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO strix_reader",
        database=db,
    )
    reader_dsn = target.catalog_dsn.replace("user=postgres", "user=strix_reader")
    monkeypatch.setenv(CATALOG_ENV, reader_dsn)
    rc, out, err = lake_query(config, capsys, "SELECT count(*) AS n FROM v_runs", "--format", "csv")
    assert rc == 0 and out.splitlines() == ["n", "5"], err
    # the role itself cannot write the catalog, whatever opens it
    with pytest.raises(RuntimeError, match="permission denied"):
        postgres.psql("DELETE FROM ducklake_snapshot", database=f"{db} user=strix_reader")


# ---- 2. the file backend's WAL --------------------------------------------------------------------


def _leave_wal(path: Path) -> None:
    """A committed row that is in the WAL only, as a killed writer leaves it."""
    code = (
        "import duckdb, os, sys\n"
        "c = duckdb.connect(sys.argv[1])\n"
        "c.execute(\"SET checkpoint_threshold = '1TB'\")\n"
        "c.execute(\"INSERT INTO hosts (name) VALUES ('committed-in-wal')\")\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)


@pytest.mark.parametrize("suffix", [".wal", ".wal.checkpoint", ".wal.recovery", ".beside.csv"])
def test_a_query_cannot_write_the_wal_or_beside_the_warehouse(seeded: Path, capsys, suffix: str) -> None:
    _leave_wal(seeded)
    wal = Path(f"{seeded}.wal")
    assert wal.exists() and wal.stat().st_size > 0
    wal_before = sha(wal)
    target = seeded.parent / "beside.csv" if suffix == ".beside.csv" else Path(f"{seeded}{suffix}")
    rc = query(seeded, f"COPY (SELECT 1 x) TO {q(target)} (FORMAT csv, HEADER false, USE_TMP_FILE false)")
    err = capsys.readouterr().err
    assert rc == 1 and "nothing was read or written" in err, err
    assert sha(wal) == wal_before
    if suffix != ".wal":
        assert not target.exists()
    with Warehouse.open(seeded, read_only=True) as r:
        assert r.con.execute("SELECT count(*) FROM hosts WHERE name = 'committed-in-wal'").fetchall() == [
            (1,)
        ]


def test_reading_the_wal_is_refused_too(seeded: Path, capsys) -> None:
    _leave_wal(seeded)
    rc = query(seeded, f"SELECT * FROM read_blob({q(str(seeded) + '.wal')})")
    out, err = capsys.readouterr()
    assert rc == 1 and "committed-in-wal" not in out, err


# ---- 3. --out -------------------------------------------------------------------------------------


def _config_with(tmp_path: Path, warehouse: Path) -> Path:
    from strix_pipeline.config import DEFAULT_CONFIG

    text = DEFAULT_CONFIG.read_text()
    cfg = tmp_path / "strix.toml"
    lines = []
    for line in text.splitlines():
        if line.startswith("warehouse = "):
            line = f'warehouse = "{warehouse}"'
        elif line.startswith("artifacts = "):
            line = f'artifacts = "{tmp_path / "artifacts"}"'
        lines.append(line)
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


@pytest.mark.parametrize("which", ["warehouse", "wal", "spool", "config", "symlink", "hardlink"])
def test_out_is_never_the_warehouse_its_wal_the_spool_or_the_config(
    seeded: Path, tmp_path: Path, capsys, which: str
) -> None:
    cfg = _config_with(tmp_path, seeded)
    spool = tmp_path / "artifacts" / "spool"
    spool.mkdir(parents=True)
    (spool / "r1.spool.arrow").write_bytes(b"spooled")
    _leave_wal(seeded)
    out = {
        "warehouse": seeded,
        "wal": Path(f"{seeded}.wal"),
        "spool": spool / "r1.spool.arrow",
        "config": cfg,
        "symlink": tmp_path / "link.csv",
        "hardlink": tmp_path / "hard.csv",
    }[which]
    if which == "symlink":
        out.symlink_to(seeded)
    if which == "hardlink":
        os.link(seeded, out)
    before = {p: sha(p) for p in (seeded, Path(f"{seeded}.wal"), spool / "r1.spool.arrow", cfg)}
    for force in ((), ("--force",)):
        rc = main(
            ["--config", str(cfg), "query", "SELECT 1 AS x", "--format", "csv", "--out", str(out), *force]
        )
        err = capsys.readouterr().err
        assert rc == 1 and err.count("\n") == 1 and "--out" in err and "Traceback" not in err, err
    assert {p: sha(p) for p in before} == before
    with Warehouse.open(seeded, read_only=True) as r:
        assert r.count("runs") == 5


def test_out_replaces_a_file_only_with_force(seeded: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "result.csv"
    out.write_text("mine\n")
    for fmt in ("csv", "parquet"):
        assert query(seeded, "SELECT 1 AS x", "--format", fmt, "--out", str(out)) == 1
        err = capsys.readouterr().err
        assert "exists" in err and "--force" in err and err.count("\n") == 1, err
        assert out.read_text() == "mine\n"
    assert query(seeded, "SELECT 1 AS x", "--format", "csv", "--out", str(out), "--force") == 0
    assert out.read_text().splitlines() == ["x", "1"]


@pytest.mark.parametrize("where", ["directory", "missing_parent"])
def test_out_to_a_directory_or_a_missing_parent_is_one_line(
    seeded: Path, tmp_path: Path, capsys, where
) -> None:
    out = tmp_path if where == "directory" else tmp_path / "no" / "such" / "x.csv"
    for fmt in ("csv", "parquet"):
        rc = query(seeded, "SELECT 1 AS x", "--format", fmt, "--out", str(out))
        err = capsys.readouterr().err
        assert rc == 1 and err.count("\n") == 1 and "--out" in err, err
    assert not (tmp_path / "no").exists()


# ---- 5. time and memory limits, who holds the file ------------------------------------------------

RUNAWAY = "SELECT count(*) FROM range(1000000000000) t(i) WHERE i % 7 = 3"


def test_a_query_has_a_default_timeout() -> None:
    import argparse

    from strix_pipeline.cli import query as qmod

    p = argparse.ArgumentParser()
    qmod.register(p.add_subparsers())
    args = p.parse_args(["query", "SELECT 1"])
    assert args.timeout is None  # not given: [query] timeout_s decides, 300 s unless the config says
    assert QueryConfig().timeout_s == qmod.DEFAULT_TIMEOUT_S and 0 < qmod.DEFAULT_TIMEOUT_S <= 3600


def test_a_runaway_query_stops_at_its_timeout(seeded: Path, capsys) -> None:
    t = time.monotonic()
    rc = query(seeded, RUNAWAY, "--timeout", "1", "--format", "csv")
    took = time.monotonic() - t
    err = capsys.readouterr().err
    assert rc == 1 and "--timeout" in err and took < 10, (took, err)


def test_the_configuration_bounds_a_query(seeded: Path, tmp_path: Path, capsys) -> None:
    """[query] timeout_s and memory_limit apply without the options; an option overrides them."""
    cfg = tmp_path / "strix.toml"
    cfg.write_text(DEFAULT_CONFIG.read_text() + '\n[query]\ntimeout_s = 1\nmemory_limit = "300MB"\n')
    t = time.monotonic()
    rc = main(["--config", str(cfg), "query", RUNAWAY, "--warehouse", str(seeded), "--format", "csv"])
    took, err = time.monotonic() - t, capsys.readouterr().err
    assert rc == 1 and "timeout of 1s" in err and took < 10, (took, err)
    sql = "SELECT current_setting('memory_limit') AS m"
    assert main(["--config", str(cfg), "query", sql, "--warehouse", str(seeded), "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1] in ("286.1 MiB", "300.0 MB", "300MB")
    args = ["--config", str(cfg), "query", sql, "--warehouse", str(seeded), "--format", "csv"]
    assert main([*args, "--memory-limit", "200MB"]) == 0
    assert capsys.readouterr().out.splitlines()[1] in ("190.7 MiB", "200.0 MB", "200MB")
    bad = tmp_path / "bad.toml"
    bad.write_text(DEFAULT_CONFIG.read_text() + '\n[query]\nmemory_limit = "lots"\n')
    assert main(["--config", str(bad), "query", sql, "--warehouse", str(seeded)]) == 2
    assert "query.memory_limit" in capsys.readouterr().err


def test_memory_limit_can_be_lowered_and_is_locked(seeded: Path, capsys) -> None:
    sql = "SELECT current_setting('memory_limit') AS m"
    assert query(seeded, sql, "--format", "csv", "--memory-limit", "200MB") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] in ("190.7 MiB", "200.0 MB", "200MB"), out
    rc = query(
        seeded,
        "SELECT max(length(s)) FROM (SELECT repeat('x', 1000) || i AS s, i FROM range(3000000) t(i) ORDER BY "
        "s)",
        "--memory-limit",
        "50MB",
        "--format",
        "csv",
    )
    err = capsys.readouterr().err
    assert rc == 1 and "memory" in err.lower(), err
    assert query(seeded, "SET memory_limit = '10GB'", "--memory-limit", "200MB") == 1
    assert "cannot change DuckDB settings" in capsys.readouterr().err


def test_a_writer_is_told_a_query_holds_the_file(seeded: Path) -> None:
    need(STRIX.exists(), f"the strix console script beside {sys.executable}", "pip install -e .")
    proc = subprocess.Popen(
        [str(STRIX), "query", RUNAWAY, "--warehouse", str(seeded), "--timeout", "30", "--format", "csv"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while f" {proc.pid} " not in Path("/proc/locks").read_text():
            assert time.monotonic() < deadline and proc.poll() is None, "the query never opened the file"
            time.sleep(0.05)
        told: list[str] = []
        with pytest.raises(WarehouseLocked) as e:
            Warehouse.open(seeded, lock_retry_s=0.5, on_wait=told.append)
        msg = str(e.value)
        assert "strix query" in msg and f"PID {proc.pid}" in msg and "read-only" in msg, msg
        assert "benchmark run is probably loading" not in msg, msg
        assert told and "held by a `strix query`" in told[0] and f"PID {proc.pid}" in told[0], told
    finally:
        proc.kill()
        proc.wait(timeout=10)


# ---- 7. control characters ------------------------------------------------------------------------

EVIL = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\x1b[2J\x1b[31mred\x9b1m\rbs\x08\u202egpj.exe"


@pytest.fixture
def evil(seeded: Path) -> Path:
    with Warehouse.open(seeded) as w:
        w.con.execute("UPDATE runs SET model = ? WHERE run_id = 'l1'", [EVIL])
    return seeded


def _escaped(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    for raw in ("\x1b", "\x07", "\x9b", "\r", "\x08", "\u202e"):
        assert raw not in text, (raw, text)
    assert "\\x1b]8;;http://evil.example/\\x07click" in text, text


@pytest.mark.parametrize("fmt", ["csv", "markdown", "line"])
def test_control_characters_are_escaped_in_text_formats(evil: Path, fmt: str) -> None:
    need(STRIX.exists(), f"the strix console script beside {sys.executable}", "pip install -e .")
    r = subprocess.run(
        [
            str(STRIX),
            "query",
            "SELECT model FROM runs WHERE run_id = 'l1'",
            "--warehouse",
            str(evil),
            "--format",
            fmt,
        ],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    _escaped(r.stdout)


def test_control_characters_are_escaped_in_a_terminal_table(evil: Path, tmp_path: Path) -> None:
    # the table is for a terminal: run it on a pty (util-linux script) and read every byte it wrote
    need(STRIX.exists(), f"the strix console script beside {sys.executable}", "pip install -e .")
    need(Path("/usr/bin/script").exists(), "util-linux script", "apt-get install bsdutils")
    log = tmp_path / "tty.log"
    cmd = f"{STRIX} query \"SELECT model AS m FROM runs WHERE run_id = 'l1'\" --warehouse {evil}"
    r = subprocess.run(
        ["script", "-q", "-e", "-c", cmd, str(log)],
        capture_output=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    data = log.read_bytes()
    body = data.split(b"\n", 1)[1] if data.startswith(b"Script started") else data
    # rich's own styling (bold, dim) is ESC [ ... m; the escaped model must be text, and no other ESC
    import re

    foreign = [m for m in re.findall(rb"\x1b[^\[]|\x1b\[[0-9;]*[^0-9;m]", body)]
    assert not foreign, foreign
    assert b"\x9b" not in body and b"\x07" not in body and "\u202e".encode() not in body
    assert b"\\x1b]8;;http" in body, body
